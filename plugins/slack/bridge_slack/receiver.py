"""A Slack provider's inbound, both ways it comes (Socket Mode envelopes, Events API requests),
and each remembered channel's gap read back when inbound (re)starts (``bridge_slack.backfill``),
in order per channel.

The core appends a channel's turns in the order the sink is called. Without a read-back (off,
or no store) ``live`` hands each message straight to the sink, as before. With one, each channel
has a lane: its live messages reach the sink one at a time, and from ``start`` every remembered
channel's lane is shut until its gap has been handed over. A live message for a shut lane is
held in memory and its caller acknowledges it to Slack at once: held back by not answering, it
would hold the Socket Mode reader (one envelope at a time) or run past Slack's 3 s and be sent
again, for minutes, while a rate-limited read pages. Holding it costs little in safety: the
channel's stored position never passes a message the sink has not taken, so a held message lost
to a crash is in the next run's read-back (a thread reply aside: history does not list replies).
Once the gap is in, the held messages follow it (those the read already had are dropped), then
the lane opens.

Gaps are read one channel at a time, most recently active first: Slack limits
``conversations.history`` per app and workspace, not per channel (Tier 3, about 50 a minute; one
a minute for commercially distributed apps outside the Marketplace), so reading several at once
would only meet the limit sooner. A 429 waits out ``Retry-After`` before the next request of any
channel. A channel the bot cannot read (``channel_not_found``, ``not_in_channel``,
``missing_scope``) is forgotten with a warning; a refused token ends inbound, as it does on the
socket; any other failure (Slack's 5xx, the network, the core's sink) reads that channel again
later from the same position, its live messages still held.

A read-back that follows one cut short (the socket dropped and the same provider's ``receive``
was called again) reads first the channels that one had not finished, in the order it had them,
then the others, most recently active first: started over each time at the most recently active,
repeated drops under a one-a-minute limit would read the first channels again and again and the
last never. Every remembered channel is still read at every start, since a drop can lose
messages in any of them. What the cut one held is kept and handed on after the next read-back.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn

import anyio

from bridge_core import (
    Forbidden,
    InboundMessage,
    InboundSink,
    MessageRejected,
    NotFound,
    RateLimited,
    Unreachable,
)
from bridge_slack.backfill import GAP_CAP, Positions, read_gap, ts_key
from bridge_slack.events import from_history

__all__ = [
    "FLUSH_INTERVAL",
    "HELD_CAP",
    "LOAD_WAIT",
    "RATE_LIMIT_WAIT",
    "RETRY_WAIT",
    "UNREADABLE",
    "Receiver",
]

log = logging.getLogger("bridge_slack")

FLUSH_INTERVAL = 2.0
"""Seconds between writes of the positions while messages arrive (none while idle): a write per
message would cost a store write per message; a crash loses at most this much progress, read
again at the next start and dropped by the core's dedup."""

LOAD_WAIT = 1.0
"""Seconds a live message waits for ``receive`` to read the positions when the HTTP route came
first (the gateway calls ``receive`` at once after serving it); past it, it is handed on, and
no later message waits until a ``receive`` starts. The wait is inside the Events API request,
which Slack gives 3 s before it counts a timeout and sends the event again."""

RATE_LIMIT_WAIT = 60.0
"""Seconds waited after a 429 that gave no usable ``Retry-After``: the slowest tier's minute."""

RETRY_WAIT = 30.0
"""First wait before a channel whose read-back failed is read again, doubling to 300 s, as the
core's reconnect watcher backs off."""

HELD_CAP = GAP_CAP
"""Most live messages held per channel while its gap is read. Past it the newest are dropped
(and every later one until the channel is read again), and the channel is read again once what
is held is handed on, from the newest held: a read made after a message arrived has it. Dropping
the oldest instead would let the held ones move the position past them."""

UNREADABLE = {
    "channel_not_found": "the channel is gone, or private and the bot is no longer in it",
    "not_in_channel": "the bot is not a member of the channel",
    "missing_scope": "the app lacks the channel type's history scope (channels:history, "
    "groups:history, im:history or mpim:history)",
}
"""``conversations.history`` refusals that are the channel's: it is forgotten, not retried. A
person's next message there remembers it again."""

History = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]
OwnIds = Callable[[], tuple[str | None, str | None]]


class _Unreadable(Exception):
    """Slack refused to read this channel's history for a reason that is the channel's."""


@dataclass(eq=False)
class _Lane:
    # asyncio's lock: first to wait, first to get it, as documented; slack-sdk and aiohttp run
    # on asyncio only.
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    shut: bool = False  # its gap is not handed over yet: live messages are held
    held: list[tuple[InboundMessage, InboundSink]] = field(default_factory=list)
    overflowed: bool = False  # a live message was dropped: read the channel once more
    failed: set[str] = field(default_factory=set)  # ts the sink refused, not yet taken since
    newest: str | None = None  # the newest ts taken while ``failed`` holds the position back
    users: int = 0
    # its position when it last held nothing: a held message at or before it was taken then.
    # Not the position at each read: a read cut short (or failed) may have moved it past a held
    # thread reply, which no read lists.
    floor: tuple[int, int] | None = None

    @property
    def idle(self) -> bool:
        return not (self.shut or self.held or self.failed or self.users)


@dataclass(frozen=True)
class _Had:
    """What a channel's read had: every message up to ``floor`` (its stored position) and those
    listed after it. Not every message before the newest listed: ``conversations.history``
    leaves replies in threads out, and a held reply must still be handed on."""

    floor: tuple[int, int] | None
    listed: set[tuple[int, int]]

    def has(self, message: InboundMessage) -> bool:
        key = ts_key(_ts_of(message))
        if key is None:
            return False
        return (self.floor is not None and key <= self.floor) or key in self.listed


def _ts_of(message: InboundMessage) -> str:
    # to_inbound builds every Slack message id as "{channel}:{ts}"
    return message.message_id.rpartition(":")[2]


class Receiver:
    """One provider's inbound lanes and read-back. ``live`` is what both inbound paths call
    with each person's message; ``start`` shuts the remembered channels' lanes; ``run`` reads
    their gaps, then writes the positions every ``FLUSH_INTERVAL`` until cancelled."""

    def __init__(self, *, profile: str, own_ids: OwnIds) -> None:
        self._profile = profile
        self._own_ids = own_ids
        self._positions: Positions | None = None
        self._lanes: dict[str, _Lane] = {}
        self._loading: anyio.Event | None = None
        self._closed = False
        self._not_before = 0.0  # anyio's clock: no history request before it (a 429's wait)
        # the channels the last read-back started has not finished, in its order (a dict kept
        # as an ordered set): the next one reads them first if this one is cut short
        self._unfinished: dict[str, None] = {}

    # ------------------------------------------------------------------ live

    def expect(self) -> None:
        """Inbound is about to start: live messages wait for ``start`` (or ``close``), at most
        ``LOAD_WAIT``, so none overtakes a gap not yet known to be there."""
        if self._loading is None or self._loading.is_set():
            self._loading = anyio.Event()  # a later receive loads the positions afresh

    def start(self, positions: Positions | None) -> None:
        """Shut the lane of every channel ``positions`` remembers, and of every channel with
        messages still held from a read-back cut short; ``None``: no read-back (what is held
        waits for a start that reads back)."""
        self._positions = positions
        self._closed = False  # an embedder's provider is given its receive again after a drop
        if positions is not None:
            for channel in positions.channels():
                lane = self._lane(channel)
                if not lane.held:
                    lane.floor = ts_key(positions.get(channel))
                lane.shut = True
            for lane in self._lanes.values():
                if lane.held:
                    lane.shut = True
        if self._loading is not None:
            self._loading.set()

    async def live(self, message: InboundMessage, sink: InboundSink) -> None:
        """Hand a live message on; raises what the sink raised (the caller leaves it
        unacknowledged, and Slack sends it again). Returns at once for a shut lane."""
        loading = self._loading
        if loading is not None and not loading.is_set():
            # a route served with no receive to start it must not hold its messages for ever,
            # nor each one in turn: one wait is enough to tell
            with anyio.move_on_after(LOAD_WAIT):
                await loading.wait()
            loading.set()
        if self._positions is None or self._closed:
            await sink(message)
            return
        channel, ts = message.channel, _ts_of(message)
        lane = self._lane(channel)
        if lane.shut:
            # Past the cap the newest are dropped, and so is every later one until the channel
            # is read again: what is held stays a run with nothing missing before it, so handing
            # it on never moves the position past a dropped message.
            if lane.overflowed or len(lane.held) >= HELD_CAP:
                lane.overflowed = True
            else:
                lane.held.append((message, sink))
            return
        lane.users += 1
        try:
            async with lane.lock:
                await self._deliver(lane, channel, ts, message, sink, remember=True)
        finally:
            lane.users -= 1
            self._drop_if_idle(channel, lane)

    async def _deliver(
        self,
        lane: _Lane,
        channel: str,
        ts: str,
        message: InboundMessage,
        sink: InboundSink,
        *,
        remember: bool,
    ) -> None:
        try:
            await sink(message)
        except BaseException:
            # The position must not pass it, until Slack's resend of it is taken.
            lane.failed.add(ts)
            raise
        lane.failed.discard(ts)
        self._advance(lane, channel, ts, remember=remember)

    def _advance(self, lane: _Lane, channel: str, ts: str, *, remember: bool) -> None:
        key = ts_key(ts)
        if key is None or self._positions is None:
            return
        newest = ts_key(lane.newest)
        if newest is None or key > newest:
            lane.newest = ts
        if not lane.failed and lane.newest is not None:
            self._positions.advance(channel, lane.newest, remember=remember)
            lane.newest = None

    def _lane(self, channel: str) -> _Lane:
        lane = self._lanes.get(channel)
        if lane is None:
            lane = self._lanes[channel] = _Lane()
        return lane

    def _drop_if_idle(self, channel: str, lane: _Lane) -> None:
        if lane.idle and lane.newest is None and self._lanes.get(channel) is lane:
            del self._lanes[channel]

    # ------------------------------------------------------------------ read-back

    async def run(
        self, sink: InboundSink, history: History, *, connected: anyio.Event | None = None
    ) -> NoReturn:
        """Read the shut channels' gaps (after ``connected``: the socket's hello, so nothing
        written meanwhile falls between the read and the socket), then write the positions
        every ``FLUSH_INTERVAL`` until cancelled. Raises ``Unreachable`` for a refused token."""
        ended: list[Unreachable] = []
        try:
            async with anyio.create_task_group() as tasks:
                # written all along: a channel backing off (up to 300 s) holds no other back
                tasks.start_soon(self._flush_every)
                try:
                    if connected is not None:
                        await connected.wait()
                    await self._backfill(sink, history)
                except Unreachable as exc:  # raised below, on its own rather than in a group
                    ended.append(exc)
                    tasks.cancel_scope.cancel()
                else:
                    await anyio.sleep_forever()
            raise ended[0]
        finally:
            self.close()
            with anyio.CancelScope(shield=True), anyio.move_on_after(10.0):
                await self.flush()

    async def _flush_every(self) -> NoReturn:
        while True:
            await anyio.sleep(FLUSH_INTERVAL)
            await self.flush()

    async def _backfill(self, sink: InboundSink, history: History) -> None:
        pending = [channel for channel, lane in self._lanes.items() if lane.shut]
        pending.sort(key=self._order())
        self._unfinished = dict.fromkeys(pending)
        attempt = 0
        while pending:
            again = []
            for channel in pending:
                if await self._catch_up(channel, sink, history):
                    del self._unfinished[channel]
                else:
                    again.append(channel)
            await self.flush()
            if again:
                wait = min(300.0, RETRY_WAIT * 2.0**attempt)
                log.warning(
                    "Slack profile %s: reading back %d channel(s) failed; trying again in "
                    "%g s, their live messages held until then",
                    self._profile,
                    len(again),
                    wait,
                )
                await anyio.sleep(wait)
                attempt += 1
            pending = again

    def _order(self) -> Callable[[str], tuple[int, int]]:
        """First the channels the last read-back had not finished, in its order (a rotation:
        by recency, the channels it had put last would stay last after every drop), then the
        others, most recently active first."""
        assert self._positions is not None
        recency = {channel: i for i, channel in enumerate(self._positions.channels())}
        unfinished = {channel: i for i, channel in enumerate(self._unfinished)}

        def key(channel: str) -> tuple[int, int]:
            if channel in unfinished:
                return 0, unfinished[channel]
            return 1, recency.get(channel, len(recency))

        return key

    async def _catch_up(self, channel: str, sink: InboundSink, history: History) -> bool:
        """Hand over one channel's gap, then its held messages, and open its lane; False when
        it is to be tried again. ``Unreachable`` goes up: inbound ends."""
        lane = self._lane(channel)
        try:
            async with lane.lock:
                while True:
                    lane.overflowed = False  # this read has whatever was dropped before it
                    if not lane.held:
                        assert self._positions is not None
                        lane.floor = ts_key(self._positions.get(channel))
                    had = await self._read_back(channel, lane, sink, history)
                    await self._release_held(channel, lane, had)
                    if not lane.overflowed:
                        break
        except Unreachable:
            raise
        except _Unreadable as exc:
            reason = str(exc)
            log.warning(
                "Slack profile %s: channel %s cannot be read back (%s: %s); it is forgotten, "
                "and messages sent there while inbound was down are not delivered",
                self._profile,
                channel,
                reason,
                UNREADABLE.get(reason, "asking again cannot help"),
            )
            assert self._positions is not None
            self._positions.forget(channel)
            return await self._release_forgotten(channel, lane)
        except Exception as exc:
            log.warning(
                "Slack profile %s: reading back channel %s failed (%r)", self._profile, channel, exc
            )
            return False
        lane.shut = False
        self._drop_if_idle(channel, lane)
        return True

    async def _release_forgotten(self, channel: str, lane: _Lane) -> bool:
        """Hand on a forgotten channel's held messages and open its lane; False when the sink
        failed one (tried again later, from the one that failed)."""
        try:
            async with lane.lock:
                await self._release_held(channel, lane, None)
        except Exception as exc:
            log.warning(
                "Slack profile %s: handing on channel %s's held messages failed (%r)",
                self._profile,
                channel,
                exc,
            )
            return False
        lane.shut = False
        self._drop_if_idle(channel, lane)
        return True

    async def _read_back(
        self, channel: str, lane: _Lane, sink: InboundSink, history: History
    ) -> _Had | None:
        """Deliver the channel's gap; what the read had (or ``None``: it read nothing)."""
        assert self._positions is not None
        oldest = self._positions.get(channel)
        if oldest is None:
            return None  # forgotten (pushed out by newer channels) since it was shut

        async def page(arguments: dict[str, Any]) -> dict[str, Any]:
            return await self._page(channel, arguments, history)

        gap, _ = await read_gap(page, oldest=oldest, profile=self._profile, channel=channel)
        delivered = 0
        for ts, data in gap:
            message = from_history(
                data, channel=channel, profile=self._profile, own_ids=self._own_ids()
            )
            if message is not None:
                await self._deliver(lane, channel, ts, message, sink, remember=False)
                delivered += 1
            else:
                self._advance(lane, channel, ts, remember=False)
        if delivered:
            log.info(
                "Slack profile %s: delivered %d message(s) written in channel %s while inbound "
                "was down",
                self._profile,
                delivered,
                channel,
            )
        listed = {key for key in (ts_key(ts) for ts, _ in gap) if key is not None}
        return _Had(lane.floor, listed)

    async def _release_held(self, channel: str, lane: _Lane, had: _Had | None) -> None:
        """The held live messages, in the order they came, but those the read already had.
        One that fails (or is cut short) stays first in line, for the channel's next read."""
        if had is not None:
            # all at once, before any is handed on: cut short while the sink takes one, the
            # rest must not be handed on again after the next read, which starts past them
            lane.held[:] = [(message, sink) for message, sink in lane.held if not had.has(message)]
        while lane.held:
            message, sink = lane.held[0]
            if had is None or not had.has(message):
                await self._deliver(lane, channel, _ts_of(message), message, sink, remember=True)
            del lane.held[0]

    async def _page(
        self, channel: str, arguments: dict[str, Any], history: History
    ) -> dict[str, Any]:
        """One ``conversations.history`` answer; a 429 waits as Slack says (every channel's
        next request waits with it) and asks again."""
        while True:
            wait = self._not_before - anyio.current_time()
            if wait > 0:
                await anyio.sleep(wait)
            try:
                answer = await history(channel, arguments)
            except (Forbidden, NotFound, MessageRejected) as exc:
                raise _Unreadable(str(exc)) from None  # asking again cannot help
            except RateLimited as exc:
                wait = RATE_LIMIT_WAIT if exc.retry_after is None else exc.retry_after
                self._not_before = anyio.current_time() + wait
                log.info(
                    "Slack profile %s: reading back channel %s is rate limited; waiting %g s",
                    self._profile,
                    channel,
                    wait,
                )
                continue
            error = answer.get("error")
            if answer.get("ok") is False and isinstance(error, str):
                raise _Unreadable(error)
            return answer

    # ------------------------------------------------------------------ positions

    async def flush(self) -> None:
        if self._positions is not None:
            await self._positions.flush_or_log()

    def close(self) -> None:
        """Inbound is over: open every lane. What is held is kept, for the next start to hand
        on after its read-back: it was acknowledged, so Slack does not send it again, and a
        thread reply is in no read-back (history does not list replies). Live messages until
        that start (over the Events API only) go straight to the sink, as without a read-back,
        so they may come before what is held."""
        self._closed = True
        for lane in self._lanes.values():
            lane.shut = False
        if self._loading is not None:
            self._loading.set()
