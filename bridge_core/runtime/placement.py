"""Scale-out: which gateway runs each channel's notifier, and how fleet events reach it.

Placement reuses the ownership package's machinery rather than a second one: every gateway is a
member of one more agent group, ``__gateways__``, kept in the same Redis log as the channels'
groups (joins, heartbeats, the reaper's exactly-once expiry records). A channel's notifier runs
on the rendezvous-hash owner of the channel's name among the members every gateway reads from
that log, so all gateways agree without a coordination round trip.

Handover without overlap: a member that is not yet eligible (``since`` in the future) already
takes the channel away from the incumbent (which stops as soon as it reads the join) but starts
only once it is eligible, so the settle delay separates the two. A gateway whose heartbeat is
stale stops notifying, as its agent group members stop delivering.

Fleet events travel through one Redis stream per channel (entries are JSON arrays, one per
accepted request): any gateway appends, the channel's host reads from a cursor it saves after
each batch, and a new host starts from the saved cursor, so nothing accepted while the channel
moved is lost. Stream entries are retained (``MAXLEN ~``) and read with ``XREAD``, never Pub/Sub,
which would drop what nobody was listening for.

A new host starts with a fresh notifier (message refs are not persisted) and restates, from the
last ``rehydrate`` entries before the cursor, each agent still running there (its spawn and its
latest status), so running agents get fresh live messages while finished ones are not announced
again.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import anyio
from redis.asyncio import Redis

from bridge_core.conversation import Frame, Turn
from bridge_core.events import (
    AgentFinished,
    AgentGone,
    AgentSpawned,
    EventError,
    FleetEvent,
    StatusChanged,
    event_to_json,
    parse_event,
)
from bridge_core.ownership import AgentGroupMember, ConversationLog, owner_of

__all__ = ["GATEWAYS_GROUP", "FleetBus", "NotifierPlacement"]

log = logging.getLogger("bridge_core.runtime.placement")

GATEWAYS_GROUP = "__gateways__"


async def _no_turns(turn: Turn, history: Sequence[Turn | Frame]) -> None:
    log.warning("the gateways group got a turn (%s); it carries membership only", turn.message_id)


class NotifierPlacement:
    """This gateway's membership of the gateways group, and the placement rule."""

    def __init__(
        self,
        log: ConversationLog,
        *,
        gateway_id: str,
        settle: float,
        heartbeat: float,
        expiry: float | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.member = AgentGroupMember(
            log,
            member_id=gateway_id,
            on_turn=_no_turns,
            settle=settle,
            heartbeat=heartbeat,
            expiry=expiry,
            lookback=0.0,
        )
        self._clock = clock

    async def run(self) -> None:
        await self.member.run()

    def stop(self) -> None:
        self.member.stop()

    @property
    def live_gateways(self) -> int:
        view = self.member.view
        return len(view.members) if view is not None else 0

    def hosts(self, channel: str) -> bool:
        """Whether this gateway should run ``channel``'s notifier now."""
        member = self.member
        view, me = member.view, member.current_id
        if view is None or me is None or not member.delivering:
            return False
        members = view.members
        if me not in members:
            return False
        now = self._clock()  # compared with ``since`` from the log's (Redis server's) clock
        eligible = [m for m, since in members.items() if since <= now] or list(members)
        return owner_of(channel, members) == me and owner_of(channel, eligible) == me


class FleetBus:
    """Fleet events through one Redis stream per channel."""

    def __init__(
        self, redis: Redis, *, prefix: str, max_len: int = 100_000, rehydrate: int = 1000
    ) -> None:
        self._redis = redis
        self._prefix = prefix
        self._max_len = max_len
        self.rehydrate = rehydrate

    @classmethod
    def connect(cls, url: str, *, prefix: str) -> FleetBus:
        return cls(Redis.from_url(url), prefix=prefix)

    async def aclose(self) -> None:
        await self._redis.aclose()

    def _stream(self, channel: str) -> str:
        return f"{self._prefix}:fleet:{{{channel}}}"

    def _cursor(self, channel: str) -> str:
        return f"{self._prefix}:fleet:{{{channel}}}:cursor"

    async def publish(self, channels: Sequence[str], events: Sequence[FleetEvent]) -> None:
        """Append ``events`` to every channel's stream in one round trip (accepted on return)."""
        payload = json.dumps([event_to_json(e) for e in events], separators=(",", ":"))
        pipe = self._redis.pipeline(transaction=False)
        for channel in channels:
            pipe.xadd(self._stream(channel), {"b": payload}, maxlen=self._max_len, approximate=True)
        await pipe.execute()

    async def running_before(self, channel: str, cursor: Any) -> list[FleetEvent]:
        """Events that restate the agents still running at ``cursor`` (their spawn and latest
        status), read from the last ``rehydrate`` entries before it."""
        entries: Any = await self._redis.xrevrange(
            self._stream(channel), max=cursor, count=self.rehydrate
        )
        spawned: dict[str, AgentSpawned] = {}
        latest: dict[str, FleetEvent] = {}
        for _entry_id, fields in reversed(entries):
            for data in json.loads(fields[b"b"]):
                try:
                    event = parse_event(data)
                except EventError:
                    continue
                if isinstance(event, AgentSpawned):
                    spawned[event.agent] = event
                    latest[event.agent] = event
                elif isinstance(event, (StatusChanged, AgentFinished, AgentGone)):
                    latest[event.agent] = event
        out: list[FleetEvent] = []
        for agent, event in latest.items():
            if isinstance(event, (AgentFinished, AgentGone)):
                continue
            out.append(spawned.get(agent) or AgentSpawned(agent, event.workspace))
            if isinstance(event, StatusChanged):
                out.append(event)
        return out

    async def follow(
        self, channel: str, take: Callable[[list[FleetEvent]], None], *, block_ms: int = 500
    ) -> None:
        """Feed ``take`` the channel's events from the saved cursor on, one call per stream
        entry (a request's batch, in order; ``Notifier.handle_all``), saving the cursor after
        each read; runs until cancelled."""
        stream, cursor_key = self._stream(channel), self._cursor(channel)
        # redis-py's reply types are loose unions; these are bytes and lists of them
        cursor: Any = await self._redis.get(cursor_key)
        if cursor is None:
            # the channel's first host ever: take everything accepted before it came up
            cursor = b"0-0"
        else:
            # taking over: the agents still running get fresh live messages (refs are not
            # persisted), the finished ones are not announced again
            take(await self.running_before(channel, cursor))
        while True:
            batches: Any = await self._redis.xread({stream: cursor}, count=100, block=block_ms)
            if not batches:
                continue
            for entry_id, fields in batches[0][1]:
                events: list[FleetEvent] = []
                for data in json.loads(fields[b"b"]):
                    try:
                        events.append(parse_event(data))
                    except EventError as exc:  # written by a newer gateway, perhaps
                        log.warning("fleet stream of %s: skipped an event: %s", channel, exc)
                take(events)
                cursor = entry_id
            await self._redis.set(cursor_key, cursor)


async def wait_until(condition: Callable[[], bool], *, poll: float = 0.1) -> None:
    """Wait for a condition read from a view that offers no change event."""
    while not condition():  # noqa: ASYNC110 - the group view has no change event to wait on
        await anyio.sleep(poll)
