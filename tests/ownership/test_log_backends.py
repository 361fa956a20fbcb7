"""One suite every conversation log backend passes: memory, SQLite, and the real Redis."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from bridge_core.conversation import Frame, Join, Leave, LeaveReason, Turn
from bridge_core.ownership import ConversationLog, MemoryConversationLog, MemoryLogStore
from bridge_core.provider import InboundMessage
from bridge_core.testing.services import require_redis

pytestmark = pytest.mark.anyio

Factory = Callable[[], Awaitable[ConversationLog]]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # real I/O: redis.asyncio needs asyncio; timing here is real and short


@pytest.fixture(params=["memory", "sqlite", "redis"])
async def open_log(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Factory]:
    """A factory of handles on one fresh channel log (several handles = several gateways)."""
    handles: list[ConversationLog] = []
    channel = "C-" + uuid.uuid4().hex[:8]
    prefix = "test-own-" + uuid.uuid4().hex[:10]
    store = MemoryLogStore()
    url = require_redis() if request.param == "redis" else ""

    async def factory() -> ConversationLog:
        log: ConversationLog
        if request.param == "memory":
            log = MemoryConversationLog(store, channel=channel)
        elif request.param == "sqlite":
            from bridge_core.ownership.sqlite_log import SqliteConversationLog

            log = await SqliteConversationLog.open(
                str(tmp_path / "bridge.db"), channel=channel, poll_interval=0.02
            )
        else:
            from bridge_core.ownership.redis_log import RedisConversationLog

            log = await RedisConversationLog.connect(url, channel=channel, key_prefix=prefix)
        handles.append(log)
        return log

    yield factory
    if request.param == "redis":
        import redis.asyncio as aioredis

        client = aioredis.Redis.from_url(url)
        keys = [key async for key in client.scan_iter(match=f"{prefix}:*")]
        if keys:
            await client.delete(*keys)
        await client.aclose()
    for handle in handles:
        await handle.aclose()


def message(mid: str, author: str = "alice", **extra: Any) -> InboundMessage:
    return InboundMessage(
        message_id=mid, channel="C", author=author, text=f"text {mid}", at=0.0, **extra
    )


async def test_admission_is_idempotent_and_ordered(open_log: Factory) -> None:
    log = await open_log()
    first = await log.admit(message("m1"))
    second = await log.admit(message("m2", thread="T9"))
    assert isinstance(first, Turn) and isinstance(second, Turn)
    assert first.seq < second.seq and first.inserted_at <= second.inserted_at
    assert first.conversation == "C/u/alice" and second.conversation == "C/t/T9"
    assert second.thread == "T9" and first.text == "text m1"
    assert await log.admit(message("m1")) is None
    assert await log.admit(message("m3", author_is_bot=True)) is None
    records = await log.read(after_seq=0)
    assert records == [first, second]
    assert (await log.statistics()).turns_admitted == 2


async def test_the_same_message_through_many_gateways_at_once_is_one_turn(
    open_log: Factory,
) -> None:
    handles = [await open_log() for _ in range(4)]
    results: list[Turn | None] = []

    async def admit_all(log: ConversationLog) -> None:
        for i in range(25):
            results.append(await log.admit(message(f"dup{i}", author=f"u{i}")))

    async with anyio.create_task_group() as tg:
        for log in handles:
            tg.start_soon(admit_all, log)
    turns = [t for t in results if t is not None]
    assert sorted(t.message_id for t in turns) == sorted(f"dup{i}" for i in range(25))
    assert len(await handles[0].read(after_seq=0)) == 25


async def test_frames_joins_leaves_heartbeats(open_log: Factory) -> None:
    log = await open_log()
    joined = await log.join("a", settle=0.25)
    assert joined.members_before == {}
    assert joined.join.since == pytest.approx(joined.join.inserted_at + 0.25, abs=0.002)
    b = await log.join("b", settle=0.0)
    assert b.members_before == {"a": pytest.approx(joined.join.since, abs=0.002)}
    turn = await log.admit(message("m1"))
    assert turn is not None
    frame = await log.record_frame(turn, "a", "obligation-1")
    assert frame.answers_seq == turn.seq and frame.conversation == turn.conversation
    assert await log.heartbeat("a") is True
    leave = await log.leave("a")
    assert isinstance(leave, Leave) and leave.reason is LeaveReason.GRACEFUL
    assert await log.leave("a") is None
    assert await log.heartbeat("a") is False
    records = await log.read(after_seq=0)
    kinds = [type(r).__name__ for r in records]
    assert kinds == ["Join", "Join", "Turn", "Frame", "Leave"]
    assert records[3] == frame
    assert isinstance(records[0], Join) and records[0].since == pytest.approx(
        joined.join.since, abs=0.002
    )
    stats = await log.statistics()
    assert (stats.members, stats.turns_admitted, stats.turns_answered) == (1, 1, 1)


async def test_a_members_since_is_the_same_float_however_it_is_read(open_log: Factory) -> None:
    # Whether a member is eligible for a turn compares the two exactly: a view that took a
    # member's ``since`` from the membership and one that folded its join must agree to the bit
    # (Redis computed one as ``at + settle`` and the other from milliseconds: an ulp apart for
    # about a fifth of settles, and a turn in that millisecond had two owners).
    log = await open_log()
    joins = [await log.join(f"x{index}", settle=settle) for index, settle in enumerate(SETTLES)]
    last = await log.join("last", settle=0.0)
    folded = {r.member: r.since for r in await log.read(after_seq=0) if isinstance(r, Join)}
    for joined in joins:
        member = joined.join.member
        assert last.members_before[member] == joined.join.since == folded[member], member


SETTLES = [0.2, 0.7, 0.3, 0.9, 1.1, 0.123, 2.5, 0.01, 0.6, 0.35]


async def test_the_reaper_appends_each_expiry_exactly_once(open_log: Factory) -> None:
    handles = [await open_log() for _ in range(3)]
    await handles[0].join("dead1", settle=0.0)
    await handles[0].join("dead2", settle=0.0)
    await handles[1].join("alive", settle=0.0)
    await anyio.sleep(0.35)
    assert await handles[1].heartbeat("alive")
    reaped: list[Leave] = []

    async def reap(log: ConversationLog) -> None:
        reaped.extend(await log.reap(expiry=0.3))

    async with anyio.create_task_group() as tg:
        for log in handles * 3:
            tg.start_soon(reap, log)
    assert sorted(leave.member for leave in reaped) == ["dead1", "dead2"]
    leaves = [r for r in await handles[2].read(after_seq=0) if isinstance(r, Leave)]
    assert sorted((leave.member, leave.reason.value) for leave in leaves) == [
        ("dead1", "expired"),
        ("dead2", "expired"),
    ]
    assert await handles[0].heartbeat("dead1") is False
    assert (await handles[0].statistics()).members == 1


async def test_a_follower_wakes_on_another_handles_append(open_log: Factory) -> None:
    writer, reader = await open_log(), await open_log()
    got: list[Any] = []

    async def follow() -> None:
        got.extend(await reader.read(after_seq=0, wait=5.0))

    async with anyio.create_task_group() as tg:
        tg.start_soon(follow)
        await anyio.sleep(0.05)
        started = anyio.current_time()
        await writer.admit(message("wake"))
    assert [t.message_id for t in got if isinstance(t, Turn)] == ["wake"]
    assert anyio.current_time() - started < 1.0
    assert await reader.read(after_seq=got[-1].seq, wait=0.05) == []


async def test_read_back_rewinds_the_membership(open_log: Factory) -> None:
    log = await open_log()
    await log.join("old", settle=0.0)
    await anyio.sleep(0.02)
    window_start = (await log.read(after_seq=0))[-1].inserted_at + 0.001
    await anyio.sleep(0.02)
    await log.join("a", settle=0.5)
    t1 = await log.admit(message("m1"))
    await log.leave("old")
    me = await log.join("me", settle=0.0)
    assert set(me.members_before) == {"a"}
    backlog = await log.read_back(
        before_seq=me.join.seq, members=me.members_before, not_before=window_start
    )
    assert [type(r).__name__ for r in backlog.records] == ["Join", "Turn", "Leave"]
    assert backlog.records[1] == t1
    assert set(backlog.members_at_start) == {"old"}


async def test_recent_history_of_a_conversation(open_log: Factory) -> None:
    log = await open_log()
    turns = []
    for i in range(6):
        turn = await log.admit(message(f"h{i}", author="alice" if i % 2 else "bob"))
        assert turn is not None
        turns.append(turn)
        if i == 3:
            await log.record_frame(turn, "a", "o")
    history = await log.recent_history("C/u/alice", 3)
    assert [type(r).__name__ for r in history] == ["Turn", "Frame", "Turn"]
    assert history[0] == turns[3] and history[2] == turns[5]
    upto = await log.recent_history("C/u/alice", 10, up_to_seq=turns[3].seq)
    assert [r.seq for r in upto] == [turns[1].seq, turns[3].seq]
    assert all(isinstance(r, Turn | Frame) for r in upto)


async def test_sqlite_seen_ids_and_unanswered_turns_survive_a_restart(tmp_path: Path) -> None:
    from bridge_core.ownership.sqlite_log import SqliteConversationLog

    path = str(tmp_path / "bridge.db")
    log = await SqliteConversationLog.open(path, channel="C")
    turn = await log.admit(message("before-crash"))
    await log.aclose()
    again = await SqliteConversationLog.open(path, channel="C")
    assert await again.admit(message("before-crash")) is None  # the platform's replay
    assert await again.read(after_seq=0) == [turn]  # still there, unanswered
    await again.aclose()


async def test_sqlite_inserted_at_never_goes_back_with_the_clock(tmp_path: Path) -> None:
    from bridge_core.ownership.sqlite_log import SqliteConversationLog

    now = [1000.0]
    log = await SqliteConversationLog.open(
        str(tmp_path / "b.db"), channel="C", clock=lambda: now[0]
    )
    first = await log.admit(message("a"))
    now[0] = 990.0  # the wall clock steps back
    second = await log.admit(message("b"))
    assert first is not None and second is not None
    assert second.inserted_at >= first.inserted_at == 1000.0
    await log.aclose()


async def test_sqlite_prunes_old_seen_ids_and_records(tmp_path: Path) -> None:
    from bridge_core.ownership.sqlite_log import SqliteConversationLog

    now = [1000.0]
    log = await SqliteConversationLog.open(
        str(tmp_path / "b.db"), channel="C", clock=lambda: now[0], seen_ttl=60.0, retention=120.0
    )
    log.prune_every = 1
    await log.join("a", settle=0.0)
    old = await log.admit(message("old"))
    now[0] += 100.0
    assert await log.admit(message("old")) is not None  # its id is past seen_ttl: a new turn
    now[0] += 50.0
    await log.admit(message("new"))
    records = await log.read(after_seq=0)
    assert old not in records  # past the retention
    assert [r.message_id for r in records if isinstance(r, Turn)] == ["old", "new"]
    assert (await log.statistics()).members == 1  # membership is not pruned with its join record
    await log.aclose()


async def test_open_conversation_log_by_target(tmp_path: Path) -> None:
    from bridge_core.ownership import open_conversation_log
    from bridge_core.ownership.redis_log import RedisConversationLog
    from bridge_core.ownership.sqlite_log import SqliteConversationLog

    memory = await open_conversation_log("memory://", channel="C")
    assert isinstance(memory, MemoryConversationLog)
    by_path = await open_conversation_log(tmp_path / "a.db", channel="C")
    by_url = await open_conversation_log(f"sqlite://{tmp_path / 'b.db'}", channel="C")
    assert isinstance(by_path, SqliteConversationLog) and isinstance(by_url, SqliteConversationLog)
    assert (tmp_path / "b.db").exists()
    redis_log = await open_conversation_log(require_redis(), channel="C", key_prefix="t-open")
    assert isinstance(redis_log, RedisConversationLog)
    with pytest.raises(ValueError, match="unsupported target 'postgresql://x'"):
        await open_conversation_log("postgresql://x", channel="C")
    for log in (memory, by_path, by_url, redis_log):
        await log.aclose()


async def test_an_unreachable_redis_is_a_clear_log_unavailable() -> None:
    from bridge_core.ownership import LogUnavailable, open_conversation_log

    with pytest.raises(LogUnavailable, match=r"cannot reach Redis at redis://127\.0\.0\.1:1/0"):
        await open_conversation_log("redis://127.0.0.1:1/0", channel="C")


async def test_sqlite_one_failing_write_does_not_undo_the_others_in_its_batch(
    tmp_path: Path,
) -> None:
    from bridge_core.ownership.sqlite_log import SqliteConversationLog

    log = await SqliteConversationLog.open(str(tmp_path / "b.db"), channel="C")

    def broken(tx: Any) -> None:
        tx.insert("turn", conversation="C/u/x", message_id="half", author="x", body="", thread=None)
        raise RuntimeError("test: a write that fails half-way")

    results: dict[str, Any] = {}

    async def admit(mid: str) -> None:
        results[mid] = await log.admit(message(mid))

    async def fail() -> None:
        with pytest.raises(RuntimeError, match="half-way"):
            await log._submit(broken)

    commits = log.commits
    async with anyio.create_task_group() as tg:
        for mid in ("a", "b"):
            tg.start_soon(admit, mid)
        tg.start_soon(fail)
        tg.start_soon(admit, "c")
    assert log.commits - commits == 1  # one batch, committed the careful way
    turns = [r for r in await log.read(after_seq=0) if isinstance(r, Turn)]
    assert sorted(t.message_id for t in turns) == ["a", "b", "c"]
    assert all(results[m] is not None for m in "abc")
    assert (await log.statistics()).turns_admitted == 3
    await log.aclose()
