"""One ``receive`` run's inbound: live gateway messages and, when a session starts, each
remembered channel's gap read back (``bridge_discord.backfill``), in order per channel.

The core appends a channel's turns in the order the sink is called, and discord.py runs each
``MESSAGE_CREATE`` handler as a task of its own. So each Discord channel has a lane: its live
messages take the lane's lock in the order discord.py read them (asyncio's lock is first come,
first served) and reach the sink one at a time. When a session starts, every remembered channel's
lane is shut (``gate``) until its gap has been handed over, so a channel's missed messages always
reach the core before its new ones, while channels with no gap, or whose gap is read, go on.
Handing on one message at a time per channel is also what lets a channel's position be the
newest message handled: nothing older can still be in flight.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, NamedTuple

import anyio
import discord

from bridge_core import ConnectionLost, Forbidden, InboundSink, ProviderError
from bridge_discord.backfill import ChannelGone, Positions, check_empty_read, read_gap
from bridge_discord.inbound import inbound_from_json, inbound_from_message

__all__ = ["BACKFILL_CONCURRENCY", "FLUSH_INTERVAL", "Receiver"]

log = logging.getLogger("bridge_discord")

FLUSH_INTERVAL = 2.0
"""Seconds between writes of the positions while messages arrive (none while idle). A write is
one value of up to ~40 kB through the ledger's writer, so it is not made per message; what a
crash loses is at most this much progress, read again at the next start and dropped by the
core's dedup."""

BACKFILL_CONCURRENCY = 4
"""Channels whose gaps are read at once when a session starts; each channel has a rate-limit
bucket of its own at Discord, the bot's global limit is 50 requests a second."""

Fetch = Callable[[int, dict[str, int]], Awaitable[list[Any]]]
LastMessage = Callable[[int], Awaitable[int | None]]


class _EmptyRead(NamedTuple):
    channel_id: int
    after: int  # the position it was read after
    asked: float  # time.time() as the read was sent


class _Lane:
    # asyncio's lock, not anyio's: its fairness (first to wait, first to get it) is documented,
    # and its free path takes the lock without yielding, so a handler that starts first always
    # queues first. discord.py runs on asyncio only.
    __slots__ = ("gate", "lock", "read_through", "stuck", "users")

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.gate: asyncio.Event | None = None  # set, or None: open
        self.read_through = 0  # the newest id a gap read back: live ones up to it were in it
        self.stuck = False  # the sink failed a message: the position stays before it
        self.users = 0  # handlers holding or waiting for the lock

    @property
    def idle(self) -> bool:
        shut = self.gate is not None and not self.gate.is_set()
        return not (shut or self.read_through or self.stuck or self.users)


class Receiver:
    """The handlers ``receive`` gives discord.py (``handle``, ``on_session``) and its two
    background tasks (``backfill``, ``flush_every``). Without ``positions`` (no store, or
    backfill off) it only hands live messages on, in order per channel."""

    def __init__(
        self,
        sink: InboundSink,
        *,
        profile: str,
        own_user_id: int | None,
        positions: Positions | None,
        fetch: Fetch,
        last_message: LastMessage,
        fail: Callable[[ProviderError], None],
    ) -> None:
        self._sink = sink
        self._profile = profile
        self._own = own_user_id
        self._positions = positions
        self._fetch = fetch
        self._last_message = last_message
        self._fail = fail
        self._lanes: dict[int, _Lane] = {}
        self._pending: dict[int, asyncio.Event] | None = None  # the newest session's gaps
        self._session_started = anyio.Event()
        self._closed = False

    def _lane(self, channel_id: int) -> _Lane:
        lane = self._lanes.get(channel_id)
        if lane is None:
            lane = self._lanes[channel_id] = _Lane()
        return lane

    # ------------------------------------------------------------------ live

    async def handle(self, message: discord.Message) -> None:
        channel_id = message.channel.id
        lane = self._lane(channel_id)
        lane.users += 1
        try:
            async with lane.lock:
                await self._hand_on(lane, channel_id, message)
        finally:
            lane.users -= 1
            if lane.idle and self._lanes.get(channel_id) is lane:
                del self._lanes[channel_id]

    async def _hand_on(self, lane: _Lane, channel_id: int, message: discord.Message) -> None:
        # A new session may shut the lane again while this waits: wait for the newest gate.
        while (gate := lane.gate) is not None and not gate.is_set():
            await gate.wait()
        if self._closed or message.id <= lane.read_through:
            return  # the gap had it (or, past its cap, left it out as older than its newest)
        inbound = inbound_from_message(message, profile=self._profile, own_user_id=self._own)
        # Bots, webhooks and our own posts are never user turns: they stop here.
        if inbound is None or inbound.author_is_bot:
            self._advance(lane, channel_id, message.id, remember=False)
            return
        try:
            await self._sink(inbound)
        except Exception:
            lane.stuck = True  # read again from before it at the next session
            raise
        parent = inbound.channel if inbound.thread is not None else None
        guild = inbound.extra.get("guild_id")
        self._advance(lane, channel_id, message.id, parent=parent, guild=guild, remember=True)

    def _advance(
        self,
        lane: _Lane,
        channel_id: int,
        message_id: int,
        *,
        remember: bool,
        parent: str | None = None,
        guild: str | None = None,
    ) -> None:
        if self._positions is not None and not lane.stuck:
            self._positions.advance(
                channel_id, message_id, parent=parent, guild=guild, remember=remember
            )

    # ------------------------------------------------------------------ sessions

    def on_session(self) -> None:
        """A new session (READY): shut every remembered channel's lane until its gap is read.
        Runs inside discord.py's frame handling, before the session's first message."""
        if self._positions is None or self._closed:
            return
        pending: dict[int, asyncio.Event] = {}
        for channel_id, _ in self._positions.channels():
            gate = pending[channel_id] = asyncio.Event()
            self._lane(channel_id).gate = gate
        # Exactly these channels are read for this session, each opening its own gate, even
        # if it is forgotten before its turn; one first heard from later has no gap (its live
        # messages all reach this session) and must not be read over them.
        self._pending = pending
        self._session_started.set()

    async def backfill(self) -> None:
        """Read the gaps of the channels shut at each session's start, until cancelled."""
        while True:
            if self._pending is None:
                self._session_started = anyio.Event()
                await self._session_started.wait()
                continue
            pending, self._pending = self._pending, None
            limiter = anyio.CapacityLimiter(BACKFILL_CONCURRENCY)
            empty: list[_EmptyRead] = []
            async with anyio.create_task_group() as tasks:
                for channel_id, gate in pending.items():
                    tasks.start_soon(self._catch_up, channel_id, gate, limiter, empty)
            await self.flush()
            await self._check_empty_reads(empty)

    async def _check_empty_reads(self, empty: list[_EmptyRead]) -> None:
        """Once a session's gaps are in and every lane is open, ask each channel that read back
        empty for its newest message, one at a time (``check_empty_read``: without Read Message
        History, Discord answers an empty list, not an error). Not inside the read: every quiet
        channel reads empty too, and a check each would double the requests its live messages
        wait behind at every READY. A check that fails ends the checks: nothing waits on them."""
        for read in empty:
            if self._pending is not None or self._closed:  # a new session's gaps come first
                return
            try:
                await check_empty_read(
                    partial(self._last_message, read.channel_id),
                    asked=read.asked,
                    after=read.after,
                    profile=self._profile,
                    channel_id=read.channel_id,
                )
            except Exception as exc:
                log.debug(
                    "discord profile %s: checking channel %s after an empty read-back failed "
                    "(%r); the rest are not checked this session",
                    self._profile,
                    read.channel_id,
                    exc,
                )
                return

    async def _catch_up(
        self,
        channel_id: int,
        gate: asyncio.Event,
        limiter: anyio.CapacityLimiter,
        empty: list[_EmptyRead],
    ) -> None:
        async with limiter:
            try:
                await self._read_back(channel_id, empty)
            except ProviderError as exc:
                # ConnectionLost: the rebuilt provider reads this gap again from the same
                # position; Unreachable: the token was refused. The gate stays shut: this
                # channel's live messages must not overtake its gap.
                self._fail(exc)
                return
            except Exception as exc:
                log.exception(
                    "discord profile %s: reading back channel %s failed", self._profile, channel_id
                )
                self._fail(ConnectionLost(f"reading back a Discord channel failed: {exc!r}"))
                return
        gate.set()

    async def _read_back(self, channel_id: int, empty: list[_EmptyRead]) -> None:
        assert self._positions is not None
        position = self._positions.get(channel_id)
        if position is None:
            return
        asked = time.time()
        try:
            gap = await read_gap(
                partial(self._fetch, channel_id),
                after=position.after,
                profile=self._profile,
                channel_id=channel_id,
            )
        except ChannelGone as exc:
            log.warning(
                "discord profile %s: channel %s is gone (%s); it is no longer read back",
                self._profile,
                channel_id,
                exc,
            )
            self._positions.forget(channel_id)
            return
        except Forbidden as exc:
            log.warning(
                "discord profile %s: channel %s cannot be read back (%s); messages sent there "
                "while the gateway was down are not delivered",
                self._profile,
                channel_id,
                exc,
            )
            return
        if not gap:
            empty.append(_EmptyRead(channel_id, position.after, asked))
        lane = self._lane(channel_id)
        lane.stuck = False  # this read starts before any message the sink failed
        delivered = 0
        for message_id, data in gap:
            inbound = inbound_from_json(
                data,
                parent_id=position.parent,
                guild_id=position.guild,
                profile=self._profile,
                own_user_id=self._own,
            )
            if inbound is not None and not inbound.author_is_bot:
                await self._sink(inbound)
                delivered += 1
            self._positions.advance(channel_id, message_id, remember=False)
        # What was written after READY is in the gap and comes live too: every live message up
        # to the gap's newest was either in it or, past the cap, older than all it delivered.
        if gap:
            lane.read_through = max(lane.read_through, gap[-1][0])
        if delivered:
            log.info(
                "discord profile %s: delivered %d messages written in channel %s while the "
                "gateway was down",
                self._profile,
                delivered,
                channel_id,
            )

    # ------------------------------------------------------------------ positions

    async def flush_every(self, interval: float = FLUSH_INTERVAL) -> None:
        while True:
            await anyio.sleep(interval)
            await self.flush()

    async def flush(self) -> None:
        if self._positions is not None:
            await self._positions.flush_or_log()

    def close(self) -> None:
        """The run is over: release every held live message undelivered (the next run reads
        its channel back from the stored position)."""
        self._closed = True
        for lane in self._lanes.values():
            if lane.gate is not None:
                lane.gate.set()
