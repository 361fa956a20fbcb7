"""Every rule of the delivery ledger, on virtual time (trio's MockClock) over the memory store.

The memory store does no I/O, so the schedule (30 s, 2 min, the next start, penalties, 24 h,
7 days) is checked to the exact virtual second.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest
import trio.testing

from bridge_core.ledger import (
    MARKER,
    MARKER_PARTIAL,
    Delivery,
    DeliveryLedger,
    DisabledLedger,
    MemoryBackend,
    MemoryLedgerStore,
    Reply,
    Schedule,
    State,
    is_marked,
)
from bridge_core.provider import (
    Forbidden,
    MessageRef,
    NotFound,
    ProviderError,
    RateLimited,
    TransportError,
    Unreachable,
)

pytestmark = pytest.mark.anyio

BASE = 1_800_000_000.0


@pytest.fixture
def anyio_backend() -> tuple[str, dict[str, Any]]:
    return ("trio", {"clock": trio.testing.MockClock(autojump_threshold=0)})


def wall() -> float:
    return BASE + anyio.current_time()


@dataclass
class Platform:
    """A fake platform: records every send at its virtual time; raises scripted errors."""

    sent: list[tuple[float, Delivery]] = field(default_factory=list)
    errors: dict[str, list[BaseException]] = field(default_factory=dict)
    hold: dict[str, anyio.Event] = field(default_factory=dict)

    async def deliver(self, delivery: Delivery) -> MessageRef:
        gate = self.hold.get(delivery.obligation_id)
        if gate is not None:
            await gate.wait()
        self.sent.append((anyio.current_time(), delivery))
        queue = self.errors.get(delivery.obligation_id)
        if queue:
            raise queue.pop(0)
        return MessageRef(delivery.channel, f"m{len(self.sent)}", delivery.thread)

    def texts(self, obligation: str) -> list[str]:
        return [d.text for _, d in self.sent if d.obligation_id == obligation]

    def times(self, obligation: str) -> list[float]:
        return [t for t, d in self.sent if d.obligation_id == obligation]


def reply(answers: str = "m1", **extra: Any) -> Reply:
    return Reply.answering(
        profile=extra.pop("profile", "X"),
        platform=extra.pop("platform", "slack"),
        channel="C1",
        answers=answers,
        text=extra.pop("text", f"answer to {answers}"),
        thread="T1",
        **extra,
    )


class Process:
    """One gateway process on a shared memory ledger: crash it and start a new one."""

    def __init__(
        self,
        backend: MemoryBackend,
        platform: Platform,
        *,
        name: str,
        profiles: set[str] | None = None,
        connected: Callable[[str], bool] = lambda platform: True,
        schedule: Schedule | None = None,
    ) -> None:
        self.store = MemoryLedgerStore(backend, owner=f"host|{name}|0")
        self.backend = backend
        self.ledger = DeliveryLedger(
            self.store,
            deliver=platform.deliver,
            profiles=profiles or {"X"},
            connected=connected,
            schedule=schedule,
            clock=wall,
        )

    async def start(self) -> DeliveryLedger:
        await self.store.open()
        return self.ledger

    def crash(self) -> None:
        self.backend.kill(self.store.owner)


async def started(backend: MemoryBackend, platform: Platform, name: str, **kw: Any) -> Process:
    process = Process(backend, platform, name=name, **kw)
    await process.start()
    return process


async def test_a_reply_goes_out_once_clean_and_recording_again_sends_nothing() -> None:
    platform, backend = Platform(), MemoryBackend()
    ledger = (await started(backend, platform, "p1")).ledger
    row = await ledger.submit(reply(text="hello"))
    assert row.state is State.DELIVERED and row.attempts == 1
    assert platform.texts(row.id) == ["hello"]
    again = await ledger.submit(reply(text="hello"))
    assert again.state is State.DELIVERED and platform.texts(row.id) == ["hello"]
    assert (await ledger.counts_by_state())[State.DELIVERED] == 1


async def test_transient_failures_follow_30s_then_2min_then_the_next_start() -> None:
    platform, backend = Platform(), MemoryBackend()
    first = await started(backend, platform, "p1")
    obligation = reply().obligation_id
    platform.errors[obligation] = [TransportError("503")] * 4
    async with anyio.create_task_group() as group:
        await group.start(first.ledger.run)
        row = await first.ledger.submit(reply())
        assert row.state is State.FAILED and row.next_attempt_at == wall() + 30
        await anyio.sleep(1000)
        group.cancel_scope.cancel()
    # first send at 0, resends at 30 and 30 + 120; the third is left to the next start
    assert platform.times(obligation) == [0, 30, 150]
    left = await first.store.get(obligation)
    assert left is not None and left.state is State.FAILED and left.next_attempt_at is None
    assert left.resends == 2 and left.attempts == 3
    first.crash()
    second = await started(backend, platform, "p2")
    report = await second.ledger.boot_sweep()
    assert report.claimed == 1 and report.marked == 1 and report.abandoned == 1
    assert platform.times(obligation)[-1] == 1000
    texts = platform.texts(obligation)
    assert not is_marked(texts[0]) and all(text.startswith(MARKER) for text in texts[1:])
    final = await second.store.get(obligation)
    assert final is not None and final.state is State.ABANDONED and final.resends == 3
    assert "resend budget spent" in (final.last_error or "")
    assert (await second.ledger.boot_sweep()).claimed == 0  # abandoned: never sent again


async def test_rate_limits_wait_out_the_penalty_without_spending_the_budget() -> None:
    platform, backend = Platform(), MemoryBackend()
    process = await started(backend, platform, "p1")
    obligation = reply().obligation_id
    platform.errors[obligation] = [RateLimited(retry_after=7.0)] * 5 + [RateLimited()]
    async with anyio.create_task_group() as group:
        await group.start(process.ledger.run)
        await process.ledger.submit(reply())
        await anyio.sleep(100)
        group.cancel_scope.cancel()
    # five penalties of 7 s, one of the default 5 s, then delivered; no budget spent
    assert platform.times(obligation) == [0, 7, 14, 21, 28, 35, 40]
    row = await process.store.get(obligation)
    assert row is not None and row.state is State.DELIVERED and row.resends == 0
    assert platform.texts(obligation)[-1].startswith(MARKER)


async def test_unreachable_is_abandoned_at_once_and_never_retried() -> None:
    platform, backend = Platform(), MemoryBackend()
    process = await started(backend, platform, "p1")
    obligation = reply().obligation_id
    platform.errors[obligation] = [Unreachable("channel_not_found")]
    async with anyio.create_task_group() as group:
        await group.start(process.ledger.run)
        row = await process.ledger.submit(reply())
        await anyio.sleep(3 * 3600)
        group.cancel_scope.cancel()
    assert row.state is State.ABANDONED and "channel_not_found" in (row.last_error or "")
    process.crash()
    later = await started(backend, platform, "p2")
    assert (await later.ledger.boot_sweep()).claimed == 0
    assert (await later.ledger.redeliver_failed("slack")).claimed == 0
    assert len(platform.texts(obligation)) == 1


async def test_forbidden_waits_for_the_reconnect_redelivery() -> None:
    platform, backend = Platform(), MemoryBackend()
    process = await started(backend, platform, "p1")
    obligation = reply().obligation_id
    platform.errors[obligation] = [Forbidden("not_in_channel")]
    async with anyio.create_task_group() as group:
        await group.start(process.ledger.run)
        row = await process.ledger.submit(reply())
        await anyio.sleep(600)
        assert row.state is State.FAILED and len(platform.texts(obligation)) == 1
        assert (await process.ledger.redeliver_failed("discord")).claimed == 0
        report = await process.ledger.redeliver_failed("slack")
        group.cancel_scope.cancel()
    assert report.delivered == 1 and report.marked == 1
    assert platform.texts(obligation)[1].startswith(MARKER)


async def test_not_found_and_unclassified_errors_follow_the_transient_timers() -> None:
    platform, backend = Platform(), MemoryBackend()
    process = await started(backend, platform, "p1")
    a, b = reply("a").obligation_id, reply("b").obligation_id
    platform.errors[a] = [NotFound("thread gone")]
    platform.errors[b] = [ValueError("a bug in the sender")]
    async with anyio.create_task_group() as group:
        await group.start(process.ledger.run)
        await process.ledger.submit(reply("a"))
        await process.ledger.submit(reply("b"))
        await anyio.sleep(60)
        group.cancel_scope.cancel()
    assert platform.times(a) == [0, 30] and platform.times(b) == [0, 30]


async def test_crash_recovery_marks_exactly_the_rows_that_may_have_been_sent() -> None:
    platform, backend = Platform(), MemoryBackend()
    first = await started(backend, platform, "p1")
    never, _ = await first.ledger.record(reply("never-started"))
    mid, _ = await first.ledger.record(reply("mid-send"))
    assert await first.store.claim(mid.id, fence=mid.fence, now=wall()) is not None
    legacy, _ = await first.ledger.record(reply("legacy"))  # an older build's claimed pending row
    backend.rows[legacy.id] = backend.rows[legacy.id].__class__(
        **{**_fields(backend.rows[legacy.id]), "attempts": 1}
    )
    first.crash()
    second = await started(backend, platform, "p2")
    report = await second.ledger.boot_sweep()
    assert report.claimed == 3 and report.delivered == 3 and report.marked == 2
    assert platform.texts(never.id) == ["answer to never-started"]
    assert platform.texts(mid.id) == [f"{MARKER}\nanswer to mid-send"]
    assert platform.texts(legacy.id) == [f"{MARKER}\nanswer to legacy"]


def _fields(row: Any) -> dict[str, Any]:
    return {name: getattr(row, name) for name in row.__dataclass_fields__}


async def test_a_crash_during_the_boot_sweep_leaves_a_marked_resend() -> None:
    platform, backend = Platform(), MemoryBackend()
    first = await started(backend, platform, "p1")
    row, _ = await first.ledger.record(reply())
    first.crash()
    second = await started(backend, platform, "p2")
    platform.hold[row.id] = anyio.Event()
    with anyio.move_on_after(5):
        await second.ledger.boot_sweep()  # killed while its send hangs
    second.crash()
    del platform.hold[row.id]
    third = await started(backend, platform, "p3")
    assert (await third.ledger.boot_sweep()).marked == 1
    assert platform.texts(row.id) == [f"{MARKER}\nanswer to m1"]


async def test_a_chunked_reply_resumes_after_its_delivered_parts() -> None:
    platform, backend = Platform(), MemoryBackend()
    first = await started(backend, platform, "p1")
    parts = ("one", "two", "three")
    obligation = reply(chunks=parts).obligation_id
    sends = 0

    async def deliver(delivery: Delivery) -> MessageRef:
        nonlocal sends
        sends += 1
        if sends == 2:  # the second part fails once
            raise TransportError("timeout")
        return await platform.deliver(delivery)

    first.ledger._deliver = deliver
    row = await first.ledger.submit(reply(chunks=parts))
    assert row.state is State.FAILED and len(row.delivered) == 1
    first.crash()
    second = await started(backend, platform, "p2")
    assert (await second.ledger.boot_sweep()).claimed == 0  # its 30 s timer has not expired
    await anyio.sleep(30)
    await second.ledger.boot_sweep()
    assert platform.texts(obligation) == ["one", f"{MARKER_PARTIAL}\ntwo", "three"]
    done = await second.store.get(obligation)
    assert done is not None and done.state is State.DELIVERED and len(done.delivered) == 3


async def test_freshness_bound_abandons_old_rows_without_sending() -> None:
    platform, backend = Platform(), MemoryBackend()
    first = await started(backend, platform, "p1")
    row, _ = await first.ledger.record(reply())
    first.crash()
    await anyio.sleep(24 * 3600 + 1)
    second = await started(backend, platform, "p2")
    report = await second.ledger.boot_sweep()
    assert report.abandoned == 1 and report.claimed == 1 and platform.sent == []
    final = await second.store.get(row.id)
    assert final is not None and final.state is State.ABANDONED
    assert "freshness" in (final.last_error or "")


async def test_a_process_claims_only_its_profiles_rows() -> None:
    platform, backend = Platform(), MemoryBackend()
    xy = await started(backend, platform, "p1", profiles={"X", "Y"})
    z = await started(backend, platform, "p2", profiles={"Z"})
    for name, profile in (("a", "X"), ("b", "Y")):
        await xy.ledger.record(reply(name, profile=profile))
    await z.ledger.record(reply("c", profile="Z"))
    xy.crash()
    z.crash()
    only_x = await started(backend, platform, "p3", profiles={"X"})
    assert (await only_x.ledger.boot_sweep()).claimed == 1
    assert [d.profile for _, d in platform.sent] == ["X"]
    with pytest.raises(ValueError, match="profile 'Z'"):
        await only_x.ledger.record(reply("d", profile="Z"))
    with pytest.raises(ValueError, match="profile 'Z'"):
        await only_x.ledger.submit(reply("d", profile="Z"))


async def test_rows_of_a_disconnected_platform_keep_their_attempts() -> None:
    platform, backend = Platform(), MemoryBackend()
    online: set[str] = {"slack"}
    first = await started(backend, platform, "p1")
    row, _ = await first.ledger.record(reply(platform="discord"))
    first.crash()
    second = await started(backend, platform, "p2", connected=lambda p: p in online)
    assert (await second.ledger.boot_sweep()).skipped == 1
    kept = await second.store.get(row.id)
    assert kept is not None and kept.attempts == 0 and kept.state is State.PENDING
    online.add("discord")
    assert (await second.ledger.boot_sweep()).delivered == 1
    assert platform.texts(row.id) == ["answer to m1"]  # never started: clean


async def test_a_live_owners_rows_are_left_to_it() -> None:
    platform, backend = Platform(), MemoryBackend()
    busy = await started(backend, platform, "p1")
    platform.hold[reply().obligation_id] = gate = anyio.Event()
    other = await started(backend, platform, "p2")
    async with anyio.create_task_group() as group:
        group.start_soon(busy.ledger.submit, reply())
        await anyio.sleep(1)
        assert (await other.ledger.boot_sweep()).claimed == 0
        assert (await other.ledger.sweep_due()).claimed == 0
        assert (await other.ledger.redeliver_failed("slack")).claimed == 0
        gate.set()
    assert len(platform.sent) == 1


async def test_a_dead_owners_rows_are_recovered_by_the_periodic_sweep() -> None:
    platform, backend = Platform(), MemoryBackend()
    # the death watch off (ADR 0019): the periodic sweep alone must still recover the rows
    schedule = Schedule(sweep_interval=10, death_watch=1000)
    survivor = await started(backend, platform, "p1", schedule=schedule)
    victim = await started(backend, platform, "p2", schedule=schedule)
    row, _ = await victim.ledger.record(reply())
    assert await victim.store.claim(row.id, fence=row.fence, now=wall()) is not None
    async with anyio.create_task_group() as group:
        await group.start(survivor.ledger.run)
        await anyio.sleep(25)
        assert platform.sent == []  # its owner still lives
        victim.crash()
        await anyio.sleep(10)
        group.cancel_scope.cancel()
    assert platform.times(row.id) == [30]
    assert platform.texts(row.id) == [f"{MARKER}\nanswer to m1"]


async def test_delivered_rows_are_pruned_after_seven_days() -> None:
    platform, backend = Platform(), MemoryBackend()
    # A week of virtual time: the death watch (0.5 s by default) would step through it a
    # million times; this test is about pruning.
    schedule = Schedule(prune_interval=3600, sweep_interval=3600, death_watch=3600)
    process = await started(backend, platform, "p1", schedule=schedule)
    row = await process.ledger.submit(reply())
    async with anyio.create_task_group() as group:
        await group.start(process.ledger.run)
        await anyio.sleep(7 * 24 * 3600 - 60)
        assert await process.store.get(row.id) is not None
        await anyio.sleep(3600 + 120)
        group.cancel_scope.cancel()
    assert await process.store.get(row.id) is None


async def test_the_disabled_ledger_sends_once_and_records_nothing() -> None:
    platform = Platform()
    ledger = DisabledLedger(deliver=platform.deliver, clock=wall)
    ok = await ledger.submit(reply("a", chunks=("1", "2")))
    assert ok.state is State.DELIVERED and len(ok.delivered) == 2
    platform.errors[reply("b").obligation_id] = [TransportError("down")]
    lost = await ledger.submit(reply("b"))
    assert lost.state is State.ABANDONED
    assert (await ledger.boot_sweep()).claimed == 0
    assert len(platform.sent) == 3
    assert set((await ledger.counts_by_state()).values()) == {0}


def test_schedule_constants_and_marker_shape() -> None:
    schedule = Schedule()
    assert schedule.resend_delays == (30.0, 120.0) and schedule.max_resends == 3
    assert schedule.freshness == 86400 and schedule.keep_delivered == 7 * 86400
    for marker in (MARKER, MARKER_PARTIAL):
        assert marker.startswith("♻️ Recovered reply — ") and marker.endswith("may be a duplicate:")
        assert is_marked(f"{marker}\nbody")
    assert "earlier parts" in MARKER_PARTIAL
    assert not is_marked("♻️ Recovered reply is a phrase")
    with pytest.raises(ValueError, match="max_resends"):
        Schedule(max_resends=-1)
    with pytest.raises(ValueError, match="freshness"):
        Schedule(freshness=0)
    with pytest.raises(ValueError, match="profile"):
        DeliveryLedger(MemoryLedgerStore(), deliver=Platform().deliver, profiles=())
    assert issubclass(RateLimited, ProviderError)


async def test_a_dead_owners_rows_are_recovered_as_soon_as_the_death_is_seen() -> None:
    platform, backend = Platform(), MemoryBackend()
    schedule = Schedule(sweep_interval=10)  # the death watch asks every 0.5 s (ADR 0019)
    survivor = await started(backend, platform, "p1", schedule=schedule)
    victim = await started(backend, platform, "p2", schedule=schedule)
    row, _ = await victim.ledger.record(reply())
    assert await victim.store.claim(row.id, fence=row.fence, now=wall()) is not None
    async with anyio.create_task_group() as group:
        await group.start(survivor.ledger.run)
        await anyio.sleep(25.2)
        assert platform.sent == []  # its owner still lives
        victim.crash()
        await anyio.sleep(10)
        group.cancel_scope.cancel()
    assert platform.times(row.id) == [25.5]  # the next look, not the next sweep (at 30)
    assert platform.texts(row.id) == [f"{MARKER}\nanswer to m1"]
