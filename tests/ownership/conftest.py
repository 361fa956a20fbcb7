"""Fixtures for the ownership tests: trio's mock clock, and a harness of group members."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest
import trio.testing
from anyio.abc import TaskGroup

from bridge_core.conversation import Frame, Turn, obligation_id
from bridge_core.ownership import (
    AgentBusy,
    AgentGroupMember,
    LogUnavailable,
    MemoryConversationLog,
    MemoryLogStore,
)
from bridge_core.provider import InboundMessage
from bridge_core.testing.services import require_redis

CHANNEL = "C1"


class CrashableLog(MemoryConversationLog):
    """A member's handle on the shared log that can freeze like a killed (or paused) process."""

    def __init__(self, store: MemoryLogStore) -> None:
        super().__init__(store, channel=CHANNEL)
        self.frozen = False
        self.heartbeat_fails = False

    async def _gate(self) -> None:
        if self.frozen:
            await anyio.sleep_forever()

    async def record_frame(self, turn: Turn, member: str, obligation: str) -> Frame:
        await self._gate()
        return await super().record_frame(turn, member, obligation)

    async def heartbeat(self, member: str) -> bool:
        await self._gate()
        if self.heartbeat_fails:
            raise LogUnavailable("test: heartbeat cannot reach the log")
        return await super().heartbeat(member)

    async def reap(self, *, expiry: float) -> list[Any]:
        await self._gate()
        return await super().reap(expiry=expiry)

    async def read(self, *, after_seq: int, limit: int = 1000, wait: float = 0.0) -> list[Any]:
        await self._gate()
        return await super().read(after_seq=after_seq, limit=limit, wait=wait)

    async def leave(self, member: str) -> Any:
        await self._gate()
        return await super().leave(member)


@dataclass
class Delivery:
    member: str
    turn: Turn
    at: float
    answered: bool = False


@dataclass
class Group:
    store: MemoryLogStore
    tg: TaskGroup
    settle: float = 1.0
    heartbeat: float = 1.0
    expiry: float = 3.0
    answer_delay: float = 0.1
    deliveries: list[Delivery] = field(default_factory=list)
    busy_notices: list[tuple[str, Turn, str | None]] = field(default_factory=list)
    members: dict[str, AgentGroupMember] = field(default_factory=dict)
    handles: dict[str, CrashableLog] = field(default_factory=dict)
    scopes: dict[str, anyio.CancelScope] = field(default_factory=dict)
    hang: set[int] = field(default_factory=set)  # turn seqs whose answer never comes
    busy: set[int] = field(default_factory=set)  # turn seqs the agent is too busy for
    broken: set[int] = field(default_factory=set)  # turn seqs whose handler raises
    _ids: Any = field(default_factory=lambda: itertools.count(1))

    @property
    def admin(self) -> MemoryConversationLog:
        return MemoryConversationLog(self.store, channel=CHANNEL)

    def _handler(self, name: str) -> Callable[[Turn, Sequence[Turn | Frame]], Awaitable[None]]:
        async def on_turn(turn: Turn, history: Sequence[Turn | Frame]) -> None:
            member = self.members[name]
            assert member.current_id is not None
            delivery = Delivery(member.current_id, turn, anyio.current_time())
            self.deliveries.append(delivery)
            assert history and history[-1] == turn
            if turn.seq in self.busy:
                raise AgentBusy(notice="busy, try again in a minute")
            if turn.seq in self.broken:
                raise RuntimeError("test: the agent crashed on this turn")
            if turn.seq in self.hang:
                await anyio.sleep_forever()
            await anyio.sleep(self.answer_delay)
            await member.record_frame(turn, obligation_id("p", CHANNEL, turn.message_id))
            delivery.answered = True

        return on_turn

    async def start(self, name: str, **options: Any) -> AgentGroupMember:
        handle = CrashableLog(self.store)

        async def on_busy(turn: Turn, error: AgentBusy) -> None:
            self.busy_notices.append((name, turn, error.notice))

        member = AgentGroupMember(
            handle,
            member_id=name,
            on_turn=self._handler(name),
            on_busy=on_busy,
            settle=options.pop("settle", self.settle),
            heartbeat=self.heartbeat,
            expiry=self.expiry,
            exact_id=True,
            follow_wait=0.5,
            **options,
        )
        self.members[name] = member
        self.handles[name] = handle
        scope = anyio.CancelScope()
        self.scopes[name] = scope

        async def run() -> None:
            with scope:
                await member.run()

        self.tg.start_soon(run)
        await member.ready.wait()
        return member

    def crash(self, name: str) -> None:
        """Freeze the member's I/O and stop its tasks, as SIGKILL would (no leave appended)."""
        self.handles[name].frozen = True
        self.scopes[name].cancel()

    async def admit(self, author: str, text: str = "hi", *, thread: str | None = None) -> Turn:
        message = InboundMessage(
            message_id=f"m{next(self._ids)}",
            channel=CHANNEL,
            author=author,
            text=text,
            at=anyio.current_time(),
            thread=thread,
        )
        turn = await self.admin.admit(message)
        assert turn is not None
        return turn

    def delivered(self, turn: Turn) -> list[Delivery]:
        return [d for d in self.deliveries if d.turn.seq == turn.seq]

    def owner_now(self, conversation: str) -> str | None:
        """The owner of a turn committed now, per the admin's view of the log."""
        from bridge_core.ownership import GroupView

        view = GroupView(me=None, members=self.store.members)
        return view.owner(conversation, self.store.now())


def conversation_of(author: str) -> str:
    return f"{CHANNEL}/u/{author}"


def author_owned_by(group: Group, member: str, *, exclude: Sequence[str] = ()) -> str:
    """An author whose conversation ``member`` owns now."""
    for i in range(10_000):
        author = f"user{i}"
        if author in exclude:
            continue
        if group.owner_now(conversation_of(author)) == member:
            return author
    raise AssertionError(f"no conversation owned by {member}")


@pytest.fixture
def anyio_backend() -> tuple[str, dict[str, Any]]:
    return ("trio", {"clock": trio.testing.MockClock(autojump_threshold=0)})


@pytest.fixture
def harness() -> Any:
    """The harness's names, for test modules (which cannot import this conftest)."""
    import types

    return types.SimpleNamespace(
        CHANNEL=CHANNEL,
        CrashableLog=CrashableLog,
        Group=Group,
        author_owned_by=author_owned_by,
        conversation_of=conversation_of,
    )


@pytest.fixture
async def redis_log() -> AsyncIterator[Any]:
    """A ``RedisConversationLog`` handle on channel "C" in the real Redis, under a key prefix of
    its own, its keys deleted afterwards (the test module picks the asyncio backend)."""
    from bridge_core.ownership.redis_log import RedisConversationLog

    prefix = "test-own-" + uuid.uuid4().hex[:10]
    handle = await RedisConversationLog.connect(require_redis(), channel="C", key_prefix=prefix)
    yield handle
    keys = [key async for key in handle.client.scan_iter(match=f"{prefix}:*")]
    if keys:
        await handle.client.delete(*keys)
    await handle.aclose()
