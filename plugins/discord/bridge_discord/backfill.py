"""Reading back what Discord channels got while the gateway was not connected.

Discord replays missed ``MESSAGE_CREATE`` events only to a RESUME; the provider's ``receive``
ends when its connection does, and the next one IDENTIFYs a new session, which hears only what
comes after it. So every message written during a deploy or a rebuild after a drop would be no
one's turn. ``Positions`` keeps, per Discord channel id (a thread is a channel of its own), the
newest message the core accepted, in the core's key-value store; when a session starts,
``read_gap`` asks Discord for what came after it (``GET /channels/{id}/messages``). Without the
Read Message History permission Discord answers that with an empty list, not an error, so an
empty answer is checked against the channel's newest message (``GET /channels/{id}``).

One value per profile holds every channel (the store has no listing): JSON,
``{"v": 1, "channels": [[channel, after, parent or null, guild or null], ...]}``, least
recently active first, at most ``REMEMBERED_CHANNELS`` of them. A thread's parent and the guild
are kept because a message read over REST names neither, and the core's form of a message in a
thread is ``channel=<parent>, thread=<thread>``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from discord.utils import snowflake_time

from bridge_core import ChannelPositions, JsonRows, KeyValueStore, NotFound
from bridge_discord.inbound import snowflake

__all__ = [
    "CLOCK_MARGIN",
    "GAP_PAGE",
    "GAP_PAGES",
    "NAMESPACE",
    "REMEMBERED_CHANNELS",
    "ChannelGone",
    "Position",
    "Positions",
    "check_empty_read",
    "read_gap",
]

log = logging.getLogger("bridge_discord")

NAMESPACE = "bridge_discord.backfill"
_FORMAT = 1

GAP_PAGE = 100
"""Messages per ``GET /channels/{id}/messages``: Discord's most."""

GAP_PAGES = 10
"""Most pages read of one channel's gap when a session starts, as Matrix's ``GAP_PAGES``: a bot
down for days in a busy channel would otherwise hand the agent thousands of stale turns and hold
that channel's new messages back while it pages. A longer gap is read from its newest end, so
what is left out is the oldest, with a warning naming the channel."""

REMEMBERED_CHANNELS = 500
"""Most channels remembered per profile; past it the least recently active is forgotten (its
next gap is not read back). Bounds the one value written to the store, about 80 bytes a
channel."""


CLOCK_MARGIN = 2.0
"""Seconds by which a message's time (its id's) must come before a read of its channel for the
read to have missed it: Discord's clock and this host's may differ, and a message written as
the channel was read may have come after the read (it then comes live)."""


class ChannelGone(NotFound):
    """The channel's messages can never be read: it was deleted (404, Unknown Channel) or the
    request cannot be made for it. Its position is forgotten."""


@dataclass(frozen=True, slots=True)
class Position:
    """Where a channel's next gap starts: the newest message id handled, and what a message read
    over REST does not say (the thread's parent, the guild)."""

    after: int
    parent: str | None
    guild: str | None


def _optional_id(value: object) -> tuple[bool, str | None]:
    """Whether ``value`` is a stored optional id (``None`` or an id as a string), and the id."""
    if value is None:
        return True, None
    number = snowflake(value) if isinstance(value, str) else None
    return number is not None, str(number) if number is not None else None


def _parse(row: list[Any]) -> tuple[int, Position] | None:
    if len(row) != 4:
        return None
    channel, after = snowflake(row[0]), snowflake(row[1])
    parent_ok, parent = _optional_id(row[2])
    guild_ok, guild = _optional_id(row[3])
    if channel is None or after is None or not (parent_ok and guild_ok):
        return None
    return channel, Position(after, parent, guild)


_ROWS: JsonRows[int, Position] = JsonRows(
    _FORMAT, lambda channel, p: [str(channel), str(p.after), p.parent, p.guild], _parse
)


class Positions(ChannelPositions[int, Position]):
    """Each channel's ``Position``, held in memory and written to ``kv`` by ``flush``.

    ``advance`` is called only once the core accepted a message (or it was one the core never
    takes, a bot's), so a stored position never passes a message the core has not got. Writes
    are coalesced: the provider flushes every few seconds and when ``receive`` ends. A crash in
    between only moves the position back, and the re-read messages are dropped by the core's
    dedup (in-process for a rebuild, the conversation log's durable one across restarts).
    """

    def __init__(self, kv: KeyValueStore, *, profile: str, limit: int = REMEMBERED_CHANNELS):
        super().__init__(
            kv,
            namespace=NAMESPACE,
            profile=profile,
            limit=limit,
            encode=_ROWS.encode,
            decode=_ROWS.decode,
            log=log,
        )

    def channels(self) -> list[tuple[int, Position]]:
        """The remembered channels, most recently active first (their gaps are read first)."""
        return self.newest_first()

    def advance(
        self,
        channel_id: int,
        message_id: int,
        *,
        parent: str | None = None,
        guild: str | None = None,
        remember: bool,
    ) -> None:
        """``message_id`` in ``channel_id`` was handled. ``remember``: a person's message, which
        makes a channel worth reading back; others only move a channel already remembered."""
        known = self.get(channel_id)
        if known is None and not remember:
            return
        if known is not None and message_id <= known.after:
            return
        if known is not None:
            parent = parent if parent is not None else known.parent
            guild = guild if guild is not None else known.guild
        self.put(channel_id, Position(message_id, parent, guild))


Fetch = Callable[[dict[str, int]], Awaitable[list[Any]]]
Newest = Callable[[], Awaitable[int | None]]


def _by_id(page: list[Any]) -> list[tuple[int, dict[str, Any]]]:
    """The page's messages with their ids, oldest first, whatever order Discord sent them in
    (newest first, as observed; the documentation does not say)."""
    found: list[tuple[int, dict[str, Any]]] = []
    for item in page:
        message_id = snowflake(item.get("id")) if isinstance(item, dict) else None
        if message_id is not None:
            found.append((message_id, item))
    found.sort(key=lambda pair: pair[0])
    return found


async def read_gap(
    fetch: Fetch, *, after: int, profile: str, channel_id: int
) -> list[tuple[int, dict[str, Any]]]:
    """The messages of a channel after ``after``, oldest first, with their ids; ``fetch`` sends
    one ``GET /channels/{id}/messages`` with the given query and returns its list.

    The usual gap is a few messages: one request with ``after``. A full page means the gap may be
    longer than ``GAP_PAGES`` pages, so it is read again from the newest message back with
    ``before`` until it reaches ``after``; when the cap comes first, one more message is asked
    for to tell whether anything was left unread, and only then is there a warning.
    """
    page = await fetch({"after": after, "limit": GAP_PAGE})
    if len(page) < GAP_PAGE:
        return [(mid, m) for mid, m in _by_id(page) if mid > after]
    newest_first: list[tuple[int, dict[str, Any]]] = []
    before: int | None = None
    for _ in range(GAP_PAGES):
        query = {"limit": GAP_PAGE} if before is None else {"before": before, "limit": GAP_PAGE}
        page = await fetch(query)
        ordered = _by_id(page)
        fresh = [(mid, m) for mid, m in ordered if mid > after]
        newest_first.extend(reversed(fresh))
        if len(fresh) < len(page) or len(page) < GAP_PAGE or not ordered:
            return newest_first[::-1]
        before = ordered[0][0]
    assert before is not None
    past = _by_id(await fetch({"before": before, "limit": 1}))
    if past and past[0][0] > after:
        log.warning(
            "discord profile %s: channel %s had more than %d messages while the gateway was "
            "down; the older ones are not delivered",
            profile,
            channel_id,
            len(newest_first),
        )
    return newest_first[::-1]


async def check_empty_read(
    newest: Newest, *, asked: float, after: int, profile: str, channel_id: int
) -> None:
    """Warn when a read of a channel after ``after``, asked at ``asked`` (``time.time()``),
    came back empty though the channel has a newer message written before it: what Discord
    answers without Read Message History. A newer message written later (within
    ``CLOCK_MARGIN``) may have come after the read, so it says nothing. The newest message may
    also have been deleted (``last_message_id`` stays), which this cannot tell apart."""
    last = await newest()
    if last is None or last <= after:
        return
    if snowflake_time(last).timestamp() > asked - CLOCK_MARGIN:
        log.debug(
            "discord profile %s: channel %s read back empty; its newest message %s was written "
            "as it was read, so nothing is known to be missed",
            profile,
            channel_id,
            last,
        )
        return
    log.warning(
        "discord profile %s: channel %s has messages newer than the last one handled (the "
        "newest is %s), but reading them back returned none: the bot needs the Read Message "
        "History permission there to read back what it missed, and those messages were not read",
        profile,
        channel_id,
        last,
    )
