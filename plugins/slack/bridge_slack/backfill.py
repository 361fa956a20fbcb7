"""Reading back what Slack channels got while inbound was down.

Slack sends an unacknowledged event again three times (at once, after about a minute, after
about five) and then drops it, over HTTP and Socket Mode alike. A gateway down longer than that
(a failed deploy, a host outage) never hears those messages. ``Positions`` keeps, per channel,
the ``ts`` of the newest message the core accepted, in the core's key-value store; when inbound
(re)starts, ``read_gap`` asks ``conversations.history`` for what came after it.

One value per profile holds every channel (the store has no listing): JSON,
``{"v": 1, "channels": [[channel, ts], ...]}``, least recently active first, at most
``REMEMBERED_CHANNELS`` of them (about 40 bytes a channel).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

from bridge_core import ChannelPositions, JsonRows, KeyValueStore

__all__ = [
    "GAP_CAP",
    "GAP_PAGE",
    "NAMESPACE",
    "REMEMBERED_CHANNELS",
    "Positions",
    "read_gap",
    "ts_key",
]

log = logging.getLogger("bridge_slack")

NAMESPACE = "bridge_slack.backfill"
_FORMAT = 1

GAP_CAP = 1_000
"""Most messages read of one channel's gap, the newest, as Discord's and Matrix's: a bot down for
days in a busy channel would otherwise hand the agent thousands of stale turns and hold that
channel's new messages back while it pages. What is left out is the oldest, with a warning."""

GAP_PAGE = 200
"""``limit`` asked of each ``conversations.history`` page: Slack's advice for paginated methods.
Slack may answer fewer (15 for commercially distributed apps outside the Marketplace); the cursor
then simply takes more pages."""

_EMPTY_PAGES = 5
"""Empty pages in a row, each with a new cursor, after which a read stops (what is left is
warned about as past the cap is)."""

REMEMBERED_CHANNELS = 500
"""Most channels remembered per profile; past it the least recently active is forgotten."""

# Slack's ts is whole seconds, a dot and (always, in practice) six digits. Anything else is not a
# position: float() would take "nan", "1e3" or fullwidth digits, and compare 1.10 below 1.9.
_TS = re.compile(r"([0-9]{1,15})\.([0-9]{1,9})")
_CHANNEL = re.compile(r"[A-Za-z0-9]{1,64}")


def ts_key(ts: object) -> tuple[int, int] | None:
    """``ts`` as a key that orders as Slack does, or ``None`` when it is not a Slack ts."""
    if not isinstance(ts, str):
        return None
    found = _TS.fullmatch(ts)
    if found is None:
        return None
    seconds, fraction = found.groups()
    return int(seconds), int(fraction.ljust(9, "0"))


def _parse(row: list[Any]) -> tuple[str, str] | None:
    if len(row) != 2:
        return None
    channel, ts = row
    if not isinstance(channel, str) or not _CHANNEL.fullmatch(channel) or ts_key(ts) is None:
        return None
    return channel, ts


_ROWS: JsonRows[str, str] = JsonRows(_FORMAT, lambda channel, ts: [channel, ts], _parse)


class Positions(ChannelPositions[str, str]):
    """Each channel's newest handled ``ts``, held in memory and written to ``kv`` by ``flush``.

    ``advance`` is called only once the core accepted a message, so a stored position never
    passes a message the core has not got. Writes are coalesced (the receiver flushes every few
    seconds and when inbound ends); a crash in between only moves the position back, and the
    messages read again are dropped by the core's dedup.
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

    def channels(self) -> list[str]:
        """The remembered channels, most recently active first (their gaps are read first)."""
        return [channel for channel, _ in self.newest_first()]

    def advance(self, channel: str, ts: str, *, remember: bool) -> None:
        """``ts`` in ``channel`` was handled. ``remember``: a person's message, which makes a
        channel worth reading back; others only move a channel already remembered."""
        key = ts_key(ts)
        if key is None or not _CHANNEL.fullmatch(channel):
            return
        known = self.get(channel)
        if known is None and not remember:
            return
        if known is not None:
            known_key = ts_key(known)
            if known_key is not None and key <= known_key:
                return
        self.put(channel, ts)


Page = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


async def read_gap(
    page: Page, *, oldest: str, profile: str, channel: str, cap: int = GAP_CAP
) -> tuple[list[tuple[str, dict[str, Any]]], bool]:
    """The messages of ``channel`` after ``oldest``, oldest first, with their ts, and whether
    some were left unread (past ``cap``). ``page`` sends one ``conversations.history`` request
    with the given arguments and returns Slack's answer.

    Slack answers newest first and pages towards ``oldest`` (exclusive without ``inclusive``)
    with ``response_metadata.next_cursor`` while ``has_more``. Each page asks for no more than
    the cap leaves room for, so a gap of exactly ``cap`` messages ends on a page whose
    ``has_more`` is false, and the warning fires only when Slack says more are there.
    """
    floor = ts_key(oldest)
    assert floor is not None
    found: dict[tuple[int, int], tuple[str, dict[str, Any]]] = {}
    cursor: str | None = None
    seen: set[str] = set()  # a cursor that comes round again would page for ever
    empty = 0  # pages in a row that held nothing: Slack may answer one, but not for ever
    left_unread = False
    while True:
        arguments: dict[str, Any] = {"oldest": oldest, "limit": min(GAP_PAGE, cap - len(found))}
        if cursor:
            arguments["cursor"] = cursor
        answer = await page(arguments)
        messages = answer.get("messages")
        if not isinstance(messages, list):
            messages = []
        for item in messages:
            key = ts_key(item.get("ts")) if isinstance(item, dict) else None
            if key is not None and key > floor:
                found[key] = (item["ts"], item)
        metadata = answer.get("response_metadata")
        following = metadata.get("next_cursor") if isinstance(metadata, dict) else None
        more = answer.get("has_more") is True and isinstance(following, str) and bool(following)
        if len(found) >= cap:
            left_unread = more or len(found) > cap
            break
        empty = 0 if messages else empty + 1
        # Slack: a page may hold fewer results than asked, even none, while more follow; only
        # the cursor tells. One seen before, or page after empty page, would never end.
        if not more or following in seen or empty >= _EMPTY_PAGES:
            left_unread = more
            break
        assert isinstance(following, str)
        seen.add(following)
        cursor = following
    newest_first = sorted(found.items(), reverse=True)[:cap]
    if left_unread and len(found) >= cap:
        log.warning(
            "Slack profile %s: channel %s had more than %d messages while inbound was down; "
            "the older ones are not delivered",
            profile,
            channel,
            cap,
        )
    elif left_unread:
        log.warning(
            "Slack profile %s: channel %s's history pages came round again or kept coming "
            "empty; the %d message(s) read are delivered, the older ones are not delivered",
            profile,
            channel,
            len(found),
        )
    return [pair for _, pair in reversed(newest_first)], left_unread
