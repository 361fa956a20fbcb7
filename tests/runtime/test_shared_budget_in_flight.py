"""A send the shared gate granted is in flight until its call ends (ADR 0145): while it is, the
bucket of every gateway refills to one token less and every window counts it as arriving now,
so a call the scheduler stalled past a refill is never followed by a whole burst from the other
gateways; a send whose end never comes (its gateway was killed) counts as ended when its lease
runs out.

Real Redis in real time: each "platform" stamps an arrival with ``time.time()``, the clock
Redis's ``TIME`` reads on this machine, somewhere between the grant and the report of the call's
end, and the independent checker replays the budget over those stamps with no allowance beyond
its microsecond. Virtual time for the sender's side of the seam (it reports every send's end).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from redis.asyncio import Redis

from bridge_core.provider import MessageRef, MessageRejected, SendBudget, Window
from bridge_core.providers.console import ConsoleProvider, ConsoleSettings
from bridge_core.runtime.shared_budget import SharedBudgetGate, SharedBudgets
from bridge_core.sending import ChannelSender, Post, Priority
from bridge_core.testing.budget import TranscriptEntry, check_budget
from bridge_core.testing.services import require_redis

pytestmark = pytest.mark.anyio

# a burst of 3 refilling at 4 a second (full again 0.75 s after it is empty)
SLOW = SendBudget(burst=3, per_second=4.0, windows=(Window(12, 2.0),), edit_spacing=0.0)
TERMINAL = Priority.TERMINAL
VIRTUAL = pytest.mark.parametrize("anyio_backend", ["virtual"], indirect=True)


@pytest.fixture
async def budgets(prefix: str) -> AsyncIterator[list[SharedBudgets]]:
    """Three gateways' connections to one Redis."""
    connections = [SharedBudgets.connect(require_redis(), prefix=prefix) for _ in range(3)]
    yield connections
    for connection in connections:
        await connection.aclose()


def arrivals(times: list[float]) -> list[TranscriptEntry]:
    return [TranscriptEntry(t=t, op="post", channel="C", message_id=None, text="") for t in times]


async def send_at_once(gate: SharedBudgetGate, stamps: list[float], count: int) -> None:
    """``count`` sends as fast as the gate lets them go, each arriving at once (its stamp) and
    reported ended right after."""
    sent = 0
    while sent < count:
        wait = await gate.reserve(0.0, priority=TERMINAL)
        if wait:
            await anyio.sleep(wait)
            continue
        stamps.append(time.time())
        await gate.ended(0.0)
        sent += 1


async def test_a_stalled_call_is_never_followed_by_a_whole_burst(
    budgets: list[SharedBudgets],
) -> None:
    """Gateway A is granted a send and its call stalls past a whole refill; B and C send
    meanwhile; A's request arrives at the very end of its call, right after theirs. They get
    only the burst less A's send at once, so the arrivals keep the budget exactly."""
    stalled, *others = [b.gate("slack/S1", SLOW) for b in budgets]
    stamps: list[float] = []
    assert await stalled.reserve(0.0, priority=TERMINAL) == 0.0  # the bucket: 3 -> 2
    await anyio.sleep(1.0)  # stalled: counted from its grant the bucket would be full again
    answers = [await others[0].take(priority=TERMINAL, lease=5.0) for _ in range(3)]
    assert [a.go for a in answers] == [True, True, False]  # A's send in flight takes a token
    for answer in answers[:2]:
        stamps.append(time.time())
        await others[0].end(answer)
    async with anyio.create_task_group() as tg:
        for gate in others:
            tg.start_soon(send_at_once, gate, stamps, 2)
    stamps.append(time.time())  # A's request reaches the platform now, after all of theirs
    await stalled.ended(0.0)
    await send_at_once(others[1], stamps, 4)
    assert len(stamps) == 11
    assert check_budget(arrivals(stamps), SLOW) == []


async def test_counted_from_its_grant_the_stalled_send_overdraws(
    budgets: list[SharedBudgets],
) -> None:
    """The same stall with the send counted from its grant (``lease=None``: what every gateway
    did before ADR 0145): B gets a whole burst while A's call is stalled, and A's late arrival
    makes ``burst + 1`` at once at the platform."""
    stalled, other, _ = [b.gate("slack/S2", SLOW) for b in budgets]
    stamps: list[float] = []
    assert (await stalled.take(priority=TERMINAL)).go
    await anyio.sleep(1.0)
    answers = [await other.take(priority=TERMINAL) for _ in range(3)]
    assert [a.go for a in answers] == [True, True, True]
    stamps += [time.time()] * 3
    stamps.append(time.time())  # A arrives
    violations = check_budget(arrivals(stamps), SLOW)
    assert [v.rule for v in violations] == ["token bucket"]


async def test_a_window_counts_a_send_in_flight_as_arriving_now(
    budgets: list[SharedBudgets],
) -> None:
    """2 per 0.5 s: A's send, granted and stalled for longer than the window, still takes a
    slot: B gets one send, not two, until A's call has ended and then a window has passed."""
    windowed = SendBudget(burst=10, per_second=100.0, windows=(Window(2, 0.5),), edit_spacing=0)
    stalled, other, _ = [b.gate("discord/S3", windowed) for b in budgets]
    stamps: list[float] = []
    assert await stalled.reserve(0.0, priority=TERMINAL) == 0.0
    await anyio.sleep(0.7)  # past the window, counted from the grant
    first = await other.take(priority=TERMINAL, lease=5.0)
    assert first.go
    stamps.append(time.time())
    await other.end(first)
    second = await other.take(priority=TERMINAL, lease=5.0)
    assert not second.go and 0.3 < second.wait <= 0.5  # B's first send + A's, counted now
    stamps.append(time.time())  # A arrives now, at the end of its call
    await stalled.ended(0.0)
    third = await other.take(priority=TERMINAL, lease=5.0)
    assert not third.go and 0.3 < third.wait <= 0.5  # B's send and A's, from their ends
    await send_at_once(other, stamps, 3)
    assert check_budget(arrivals(stamps), windowed) == []


async def test_a_killed_gateways_send_counts_until_its_lease_runs_out(
    budgets: list[SharedBudgets], prefix: str
) -> None:
    """A gateway granted a send dies mid-call: its send holds a token until its lease ends, no
    longer, and then counts as having arrived at the lease's end; every key outlives it."""
    victim = budgets[0].gate("slack/S4", SLOW, lease=0.5)
    other = budgets[1].gate("slack/S4", SLOW)
    redis = Redis.from_url(require_redis())
    base = f"{prefix}:budget:{{slack/S4}}"
    try:
        granted = await victim.take(priority=TERMINAL, lease=victim.lease)
        assert granted.go and granted.at is not None and granted.send is not None
        for key in ("bucket", "flying"):
            ttl = await redis.pttl(f"{base}:{key}")
            assert 3000 < ttl <= 3500, (key, ttl)  # the 2 s window + 1 s, after the lease
        await budgets[0].aclose()  # killed: its end is never reported
        answers = [await other.take(priority=TERMINAL) for _ in range(3)]
        assert [a.go for a in answers] == [True, True, False]
        await anyio.sleep(0.5 + 3 / SLOW.per_second + 0.05)  # the lease, then a whole refill
        answers = [await other.take(priority=TERMINAL) for _ in range(4)]
        assert [a.go for a in answers] == [True, True, True, False]  # the whole burst again
        assert await redis.zcard(f"{base}:flying") == 0
        ended = await redis.zscore(f"{base}:sends", granted.send)
        assert ended == pytest.approx(granted.at + 0.5, abs=1e-5)  # counted at its lease's end
    finally:
        await redis.aclose()


# ---------------------------------------------------------------------- the sender, real Redis


async def test_two_senders_keep_the_budget_at_the_platform_across_a_stalled_call(
    tmp_path: Path, budgets: list[SharedBudgets]
) -> None:
    """Gateway A's sender posts and its call stalls until gateway B's sender, which began after
    a whole refill, has had three posts arrive; A's post then arrives. The arrivals the two
    "platform" calls stamp keep the budget with no allowance."""
    providers = [
        ConsoleProvider(
            ConsoleSettings(transcript=tmp_path / f"t{i}.jsonl", output="none"), run_prefix=f"g{i}"
        )
        for i in range(2)
    ]
    stalled, other = (
        ChannelSender(p, channel="C", budget=SLOW, gate=b.gate("console/S5", SLOW))
        for p, b in zip(providers, budgets[:2], strict=True)
    )
    stamps: list[float] = []
    three_arrived = anyio.Event()

    async def stalled_call(channel: str, text: str, thread: str | None) -> MessageRef:
        with anyio.move_on_after(5.0):
            await three_arrived.wait()
        stamps.append(time.time())
        return MessageRef(channel, "a")

    async def call(channel: str, text: str, thread: str | None) -> MessageRef:
        stamps.append(time.time())
        if len(stamps) == 3:
            three_arrived.set()
        return MessageRef(channel, f"b{len(stamps)}")

    try:
        async with stalled, other, anyio.create_task_group() as tg:
            tg.start_soon(stalled.send, Post("stalled", call=stalled_call))
            await anyio.sleep(1.0)  # a whole refill while A's call is stalled
            for n in range(6):
                tg.start_soon(other.send, Post(f"reply {n}", call=call))
    finally:
        for p in providers:
            await p.aclose()
    assert len(stamps) == 7
    assert check_budget(arrivals(stamps), SLOW) == []


# ---------------------------------------------------------------------- the sender's seam


class EndingGate:
    """A ``SendGate`` with ``ended``: grants everything, recording what it was told when."""

    def __init__(self) -> None:
        self.told: list[tuple[str, float]] = []
        self.hold: anyio.Event | None = None

    async def reserve(self, now: float, *, priority: int) -> float:
        self.told.append(("reserve", now))
        if self.hold is not None:
            await self.hold.wait()
            self.hold = None
        return 0.0

    async def peek(self, now: float, *, priority: int) -> float:
        return 0.0

    async def ended(self, now: float) -> None:
        self.told.append(("ended", now))


@VIRTUAL
async def test_the_sender_reports_each_calls_end_answered_or_failed(
    console: ConsoleProvider,
) -> None:
    gate = EndingGate()
    refuse = False

    async def slow(channel: str, text: str, thread: str | None) -> MessageRef:
        await anyio.sleep(1.5)
        if refuse:
            raise MessageRejected("refused after it arrived")
        return MessageRef(channel, "m")

    async with ChannelSender(console, channel="C", budget=SLOW, gate=gate) as sender:
        await sender.send(Post("one", call=slow))
        refuse = True
        with pytest.raises(MessageRejected):
            await sender.send(Post("two", call=slow))
    await console.aclose()
    assert gate.told == [("reserve", 0.0), ("ended", 1.5), ("reserve", 1.5), ("ended", 3.0)]


@VIRTUAL
async def test_the_sender_reports_a_reservation_it_did_not_use(console: ConsoleProvider) -> None:
    """Work replaced while the gate answered: the grant goes unused, and the gate is told."""
    gate = EndingGate()
    gate.hold = anyio.Event()
    async with ChannelSender(console, channel="C", budget=SLOW, gate=gate) as sender:
        sender.submit("k", text="old", on_outcome=lambda _: None)
        await anyio.sleep(0.1)
        sender.submit("k", text="new", on_outcome=lambda _: None)
        gate.hold.set()
        await anyio.sleep(1)
    await console.aclose()
    assert [what for what, _ in gate.told] == ["reserve", "ended", "reserve", "ended"]
