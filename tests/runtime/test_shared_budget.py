"""One channel budget shared through Redis by several gateways (``SharedBudgetGate``), and the
sender's ``gate=`` seam.

Real Redis in real time for the shared gate (three gates, as if three gateways, hammer one
channel; the independent checker replays the budget over every granted send; one gateway's
stream of edits against another's replies, on the bucket and on a Discord-shaped window where
claims decide), virtual time for the sender's use of a gate.
"""

from __future__ import annotations

import itertools
import logging
from pathlib import Path

import anyio
import pytest
from bridge_discord import DISCORD_BUDGET
from bridge_slack import SLACK_BUDGET
from bridge_teams import TEAMS_BUDGET
from redis.asyncio import Redis

from bridge_core.provider import SendBudget, Window
from bridge_core.providers.console import ConsoleProvider, ConsoleSettings
from bridge_core.runtime.shared_budget import (
    CLAIM_MARGIN,
    RETRY_MIN,
    Grant,
    SharedBudgetGate,
    SharedBudgets,
    headroom,
)
from bridge_core.sending import ChannelSender, Edit, Post, Priority
from bridge_core.testing.budget import (
    TranscriptEntry,
    check_budget,
    max_in_window,
    read_transcript,
)
from bridge_core.testing.services import require_redis

pytestmark = pytest.mark.anyio

# scaled down: a burst of 3, 10 a second, and at most 12 in any 2 s
BUDGET = SendBudget(burst=3, per_second=10.0, windows=(Window(12, 2.0),), edit_spacing=0.0)
VIRTUAL = pytest.mark.parametrize("anyio_backend", ["virtual"], indirect=True)


async def gateways(count: int, prefix: str) -> list[SharedBudgets]:
    return [SharedBudgets.connect(require_redis(), prefix=prefix) for _ in range(count)]


async def test_three_gateways_never_exceed_one_budget_together(prefix: str) -> None:
    budgets = await gateways(3, prefix)
    gates = [b.gate("slack/C1", BUDGET) for b in budgets]
    granted: list[list[float]] = [[] for _ in gates]
    asked = [0, 0, 0]

    async def hammer(index: int, gate: SharedBudgetGate) -> None:
        # two senders' worth of demand per gateway, retrying as soon as told
        while True:
            grant = await gate.take(priority=Priority.TERMINAL)
            asked[index] += 1
            if grant.go:
                assert grant.at is not None
                granted[index].append(grant.at)
            else:
                await anyio.sleep(grant.wait)

    try:
        with anyio.move_on_after(3.0):
            async with anyio.create_task_group() as tg:
                for index, gate in enumerate(gates):
                    tg.start_soon(hammer, index, gate)
                    tg.start_soon(hammer, index, gate)
    finally:
        for b in budgets:
            await b.aclose()

    times = sorted(t for per_gate in granted for t in per_gate)
    entries = [
        TranscriptEntry(t=t, op="post", channel="C1", message_id=None, text="") for t in times
    ]
    print(f"granted {[len(g) for g in granted]} of {asked} asks; {len(times)} in 3 s")
    assert check_budget(entries, BUDGET) == []
    assert max_in_window(times, 2.0) <= 12
    assert max_in_window(times, 0.05) <= 3  # never more than the burst at once
    # Greedy pacing fits 24 in 3 s (3 + 9 by 0.9 s, then again from 2.0 s): the gate must not
    # get there by refusing: more than one window's 12 (a loaded machine may lose a few).
    # Shares between gateways are first come, first served.
    assert len(times) >= 15


async def test_two_senders_share_the_channel_budget(tmp_path: Path, prefix: str) -> None:
    """The sender's own path: two gateways' senders, each posting 8 replies at once."""
    budgets = await gateways(2, prefix)
    providers = [
        ConsoleProvider(
            ConsoleSettings(transcript=tmp_path / f"t{i}.jsonl", output="none"), run_prefix=f"g{i}"
        )
        for i in range(2)
    ]
    senders = [
        ChannelSender(p, channel="C1", budget=BUDGET, gate=b.gate("console/C1", BUDGET))
        for p, b in zip(providers, budgets, strict=True)
    ]
    try:
        async with senders[0], senders[1], anyio.create_task_group() as tg:
            for i, sender in enumerate(senders):
                for n in range(8):
                    tg.start_soon(sender.send, Post(f"reply {i}.{n}"))
    finally:
        for b in budgets:
            await b.aclose()
        for p in providers:
            await p.aclose()
    entries = read_transcript(tmp_path / "t0.jsonl") + read_transcript(tmp_path / "t1.jsonl")
    assert len(entries) == 16 and {e.op for e in entries} == {"post"}
    # The platform sees the send a round trip after Redis granted it; allow that much jitter.
    assert check_budget(entries, BUDGET, tolerance=0.01) == []
    assert max_in_window([e.t for e in entries], 2.0, tolerance=0.01) <= 12
    # each alone would have sent its 8 within 0.6 s; together they spread past the window
    assert max(e.t for e in entries) - min(e.t for e in entries) >= 1.2


async def test_keys_are_the_channels_and_expire(prefix: str) -> None:
    [budgets] = await gateways(1, prefix)
    redis = Redis.from_url(require_redis())
    try:
        grant = await budgets.gate("slack/C9", BUDGET).take(priority=Priority.TERMINAL)
        assert grant.go
        base = f"{prefix}:budget:{{slack/C9}}"
        for key in (f"{base}:bucket", f"{base}:sends"):
            ttl = await redis.pttl(key)
            assert 0 < ttl <= 3000, (key, ttl)  # the 2 s window + 1 s
        assert await redis.zcard(f"{base}:sends") == 1
    finally:
        await budgets.aclose()
        await redis.aclose()


async def test_unreachable_redis_pauses_logs_once_and_recovers(
    prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    down = SharedBudgets.connect("redis://127.0.0.1:1/0", prefix=prefix, timeout=0.5)
    [up] = await gateways(1, prefix)
    gate = down.gate("slack/C2", BUDGET)
    try:
        with caplog.at_level(logging.WARNING, logger="bridge_core.runtime.shared_budget"):
            waits = [await gate.reserve(0.0, priority=Priority.UPDATE) for _ in range(3)]
            assert waits == [RETRY_MIN, 2 * RETRY_MIN, 4 * RETRY_MIN]
            assert gate.outages == 1
            assert len(caplog.records) == 1 and "unavailable" in caplog.records[0].message
            gate._budgets = up  # Redis answers again
            assert await gate.reserve(0.0, priority=Priority.TERMINAL) == 0.0
            assert "reachable again" in caplog.records[-1].message
    finally:
        await down.aclose()
        await up.aclose()


# ---------------------------------------------------------------------- priority between gateways


def test_headroom_leaves_a_token_per_higher_class_but_never_the_whole_bucket() -> None:
    for preset in (SLACK_BUDGET, DISCORD_BUDGET, TEAMS_BUDGET):  # bursts 3, 5, 7
        assert [headroom(preset, p) for p in Priority] == [0, 1, 2]
    two = SendBudget(burst=2, per_second=1.0)
    assert [headroom(two, p) for p in Priority] == [0, 1, 1]
    one = SendBudget(burst=1, per_second=1.0)
    assert [headroom(one, p) for p in Priority] == [0, 0, 0]  # nothing to keep back


async def test_each_class_leaves_its_headroom(prefix: str) -> None:
    """From a full bucket of 3: an edit leaves 2, a new message 1, a reply takes the last."""
    [budgets] = await gateways(1, prefix)
    slow = SendBudget(burst=3, per_second=0.5, edit_spacing=0.0)  # a token every 2 s
    gate = budgets.gate("slack/C3", slow)
    try:
        answers = [
            await gate.take(priority=p)
            for p in (Priority.UPDATE, Priority.UPDATE, Priority.NEW, Priority.NEW)
        ]
        answers += [await gate.take(priority=Priority.TERMINAL) for _ in range(2)]
        assert [a.go for a in answers] == [True, False, True, False, True, False]
        # about one token's time (2 s) each, less what refilled since
        assert [round(a.wait, 1) for a in answers if not a.go] == [2.0, 2.0, 2.0]
        # the bucket is empty now: an edit needs 3 tokens (6 s) but is told to ask again after
        # one token's time, in case its sender meanwhile has a reply that fits
        update = await gate.take(priority=Priority.UPDATE)
        assert not update.go and 1.9 < update.wait <= 2.0
        with pytest.raises(ValueError, match="priority must be a Priority"):
            await gate.take(priority=3)
    finally:
        await budgets.aclose()


async def grants_alone(gate: SharedBudgetGate, *, priority: int, count: int) -> list[float]:
    """Ask for ``count`` sends as fast as told, alone on the channel; their grant times."""
    granted: list[float] = []
    with anyio.fail_after(5.0):
        while len(granted) < count:
            grant = await gate.take(priority=priority)
            if grant.go:
                assert grant.at is not None
                granted.append(grant.at)
            else:
                await anyio.sleep(grant.wait)
    return granted


async def test_one_class_alone_keeps_the_sustained_rate(prefix: str) -> None:
    """Edits alone: one at once (burst 3 less headroom 2), then the full 20 a second."""
    [budgets] = await gateways(1, prefix)
    gate = budgets.gate("slack/C4", PRIORITY_BUDGET)
    try:
        granted = await grants_alone(gate, priority=Priority.UPDATE, count=12)
    finally:
        await budgets.aclose()
    gaps = [b - a for a, b in itertools.pairwise(granted)]
    print(f"gaps {[round(g, 4) for g in gaps]}")
    assert min(gaps) >= 1 / 20 - 1e-3  # one token each: no burst left for edits
    # 11 tokens at 20/s take 0.55 s; a loaded machine oversleeps, never undersleeps
    assert sum(gaps) < 0.55 * 1.5


# a burst of 3, 20 a second; the window never binds (3 + 40 in 2 s), so the bucket decides
PRIORITY_BUDGET = SendBudget(burst=3, per_second=20.0, windows=(Window(60, 2.0),), edit_spacing=0)


async def test_a_reply_goes_at_once_past_another_gateways_stream_of_edits(prefix: str) -> None:
    """Gateway A sends intermediate edits as fast as the budget lets it; gateway B asks for a
    reply every second edit. Each reply is granted on its first ask, and together they keep
    the budget."""
    notifier, replier = await gateways(2, prefix)
    edits_gate = notifier.gate("discord/C5", PRIORITY_BUDGET)
    replies_gate = replier.gate("discord/C5", PRIORITY_BUDGET)
    edits: list[float] = []
    replies: list[Grant] = []
    edited = anyio.Event()

    async def stream_of_edits() -> None:
        nonlocal edited
        while True:
            grant = await edits_gate.take(priority=Priority.UPDATE)
            if grant.go:
                assert grant.at is not None
                edits.append(grant.at)
                edited.set()
                edited = anyio.Event()
            else:
                await anyio.sleep(grant.wait)

    try:
        with anyio.fail_after(10.0):
            async with anyio.create_task_group() as tg:
                tg.start_soon(stream_of_edits)
                for _ in range(8):
                    # two edits since the last reply: the stream is at full speed, the bucket
                    # as low as the edits can bring it
                    seen = len(edits)
                    while len(edits) < seen + 2:
                        await edited.wait()
                    replies.append(await replies_gate.take(priority=Priority.TERMINAL))
                tg.cancel_scope.cancel()
    finally:
        await notifier.aclose()
        await replier.aclose()

    assert [r.wait for r in replies] == [0.0] * 8  # without headroom the edits leave < 1 token
    times = sorted([*edits, *(r.at for r in replies if r.at is not None)])
    entries = [
        TranscriptEntry(t=t, op="edit", channel="C5", message_id=None, text="") for t in times
    ]
    print(f"{len(edits)} edits and {len(replies)} replies in {times[-1] - times[0]:.3f} s")
    assert check_budget(entries, PRIORITY_BUDGET) == []
    assert len(edits) >= 16


# Discord's shape (burst 5, 1/s, 5 in any 5 s) ten times faster: the window binds as tightly as
# the bucket, so a stream of edits keeps it full and a slot frees every 0.1 s.
DISCORD_SHAPED = SendBudget(burst=5, per_second=10.0, windows=(Window(5, 0.5),), edit_spacing=0)


class EditStream:
    """One gateway sending intermediate edits as fast as its gate lets it, asking again the
    moment it is told; counts its asks and records its grants (server times)."""

    def __init__(self, gate: SharedBudgetGate) -> None:
        self.gate = gate
        self.granted: list[float] = []
        self.asks = 0
        self._asked = anyio.Event()

    async def run(self) -> None:
        while True:
            grant = await self.gate.take(priority=Priority.UPDATE)
            self.asks += 1
            self._asked.set()
            self._asked = anyio.Event()
            if grant.go:
                assert grant.at is not None
                self.granted.append(grant.at)
            else:
                await anyio.sleep(grant.wait)

    async def next_ask(self) -> None:
        """Return once the stream has asked again (answered after this call)."""
        seen = self.asks
        while self.asks == seen:
            await self._asked.wait()

    async def granted_more(self, count: int) -> None:
        target = len(self.granted) + count
        while len(self.granted) < target:
            await self._asked.wait()


async def test_a_reply_takes_the_next_window_slot_before_a_stream_of_edits(prefix: str) -> None:
    """Gateway A streams edits on a Discord-shaped budget, keeping its window full; gateway B
    asks for a reply every few edits. The window refuses the reply; when the slot it was told
    about frees, B lets A ask first (the race B lost before claims). The reply still gets that
    slot: no edit is granted between its first ask and its grant. Without the claim, the edit
    takes the slot and the reply waits for the next one."""
    notifier, replier = await gateways(2, prefix)
    stream = EditStream(notifier.gate("discord/C6", DISCORD_SHAPED))
    replies_gate = replier.gate("discord/C6", DISCORD_SHAPED)
    replies: list[tuple[float, int]] = []  # (granted at, asks it took)

    async def reply() -> None:
        grant = await replies_gate.take(priority=Priority.TERMINAL)
        asks = 1
        while not grant.go:
            await anyio.sleep(grant.wait)
            await stream.next_ask()  # the stream asks for the freed slot first
            grant = await replies_gate.take(priority=Priority.TERMINAL)
            asks += 1
        assert grant.at is not None
        replies.append((grant.at, asks))

    try:
        with anyio.fail_after(10.0):
            async with anyio.create_task_group() as tg:
                tg.start_soon(stream.run)
                await stream.granted_more(6)  # the window is full, and stays so
                for _ in range(6):
                    await reply()
                    await stream.granted_more(3)
                tg.cancel_scope.cancel()
    finally:
        await notifier.aclose()
        await replier.aclose()

    asks = [a for _, a in replies]
    print(f"asks per reply: {asks}; {len(stream.granted)} edits")
    assert 2 in asks  # the window did refuse replies
    # refused by the full window once at most, then granted the slot it was told about,
    # although the stream asked for it first
    assert max(asks) <= 2
    times = sorted([*stream.granted, *(at for at, _ in replies)])
    entries = [
        TranscriptEntry(t=t, op="edit", channel="C6", message_id=None, text="") for t in times
    ]
    assert check_budget(entries, DISCORD_SHAPED) == []
    assert max_in_window(times, 0.5) <= 5


async def test_a_vanished_reply_holds_edits_back_only_until_its_claim_expires(
    prefix: str,
) -> None:
    """A reply refused once whose gateway then dies: the edit stream is refused until the
    claim's expiry (the reply's wait plus the margin), then granted within one token's time."""
    notifier, replier = await gateways(2, prefix)
    stream = EditStream(notifier.gate("discord/C7", DISCORD_SHAPED))
    redis = Redis.from_url(require_redis())
    bucket = f"{prefix}:budget:{{discord/C7}}:bucket"
    try:
        with anyio.fail_after(10.0):
            async with anyio.create_task_group() as tg:
                tg.start_soon(stream.run)
                await stream.granted_more(6)
                replies_gate = replier.gate("discord/C7", DISCORD_SHAPED)
                while (grant := await replies_gate.take(priority=Priority.TERMINAL)).go:
                    # a late stream left a slot free: ask again once it has filled the window
                    await stream.granted_more(2)
                raw = await redis.hget(bucket, "claim0")
                now_seconds, now_micros = await redis.time()
                await replier.aclose()  # the gateway is gone; it never asks again
                assert raw is not None, "the refused reply left no claim"
                expiry = float(raw)
                await stream.granted_more(2)
                tg.cancel_scope.cancel()
    finally:
        await notifier.aclose()
        await redis.aclose()

    # the claim lasts the reply's wait plus the margin from its refusal, and no longer
    refused_at = expiry - grant.wait - CLAIM_MARGIN
    assert refused_at <= now_seconds + now_micros / 1e6
    after = [t for t in stream.granted if t > refused_at]
    print(
        f"claim expiry {expiry - refused_at:.3f} s after the refusal; edits after it at "
        f"{[round(t - refused_at, 3) for t in after]}"
    )
    assert after[0] >= expiry - 1e-6  # the edits waited for the claim ...
    # ... and no longer: a retry after at most one token's time (with slack for a late wake-up)
    assert after[0] <= expiry + 1 / DISCORD_SHAPED.per_second + 0.1


@pytest.mark.parametrize("priority", list(Priority), ids=lambda p: p.name)
async def test_one_class_alone_keeps_the_full_rate_of_a_window(
    prefix: str, priority: Priority
) -> None:
    """Alone, a class that claims the next slot whenever it is refused is never held back by
    its own claim: 25 sends take the burst less the headroom at once, then 10 a second."""
    [budgets] = await gateways(1, prefix)
    gate = budgets.gate(f"discord/C8{priority.name}", DISCORD_SHAPED)
    try:
        granted = await grants_alone(gate, priority=priority, count=25)
    finally:
        await budgets.aclose()
    span = granted[-1] - granted[0]
    print(f"{priority.name}: 25 sends in {span:.3f} s")
    assert max_in_window(granted, 0.5) <= 5
    # the burst less the headroom at once, the rest at 10 a second (2.0 to 2.2 s); a loaded
    # machine's late wake-ups only add (a fifth less, the window's headroom, would be 2.5 s)
    full_rate = (25 - (DISCORD_SHAPED.burst - headroom(DISCORD_SHAPED, priority))) / 10.0
    assert span < full_rate * 1.2


# ---------------------------------------------------------------------- the sender's gate seam


class ScriptedGate:
    """A ``SendGate`` answering waits from a script, recording when it was asked."""

    def __init__(self, waits: list[float]) -> None:
        self.waits = waits
        self.asked: list[float] = []
        self.priorities: list[int] = []
        self.hold: anyio.Event | None = None

    async def reserve(self, now: float, *, priority: int) -> float:
        self.asked.append(now)
        self.priorities.append(priority)
        if self.hold is not None:
            await self.hold.wait()
            self.hold = None
        return self.waits.pop(0) if self.waits else 0.0


@VIRTUAL
async def test_sender_waits_what_the_gate_says(tmp_path: Path, console: ConsoleProvider) -> None:
    gate = ScriptedGate([0.0, 1.5, 0.25, 0.0])
    async with ChannelSender(console, channel="C", budget=BUDGET, gate=gate) as sender:
        await sender.send(Post("one"))
        await sender.send(Post("two"))
    await console.aclose()
    assert [(e.t, e.text) for e in read_transcript(tmp_path / "t.jsonl")] == [
        (0.0, "one"),
        (1.75, "two"),
    ]
    assert gate.asked == [0.0, 0.0, 1.5, 1.75]


@VIRTUAL
async def test_nothing_to_say_asks_no_budget(tmp_path: Path, console: ConsoleProvider) -> None:
    gate = ScriptedGate([])
    outcomes: list[object] = []
    async with ChannelSender(console, channel="C", budget=BUDGET, gate=gate) as sender:
        sender.submit("k", text=lambda: None, on_outcome=outcomes.append)
        await anyio.sleep(1)
    await console.aclose()
    assert outcomes == [None] and gate.asked == []


@VIRTUAL
async def test_work_replaced_while_the_gate_answers_goes_next(
    tmp_path: Path, console: ConsoleProvider
) -> None:
    gate = ScriptedGate([])
    gate.hold = anyio.Event()
    outcomes: list[object] = []
    async with ChannelSender(console, channel="C", budget=BUDGET, gate=gate) as sender:
        sender.submit("k", text="old", on_outcome=outcomes.append)
        await anyio.sleep(0.1)  # the sender is asking the gate about "old"
        assert gate.asked == [0.0]
        sender.submit("k", text="new", on_outcome=outcomes.append)
        gate.hold.set()
        await anyio.sleep(1)
    await console.aclose()
    assert [e.text for e in read_transcript(tmp_path / "t.jsonl")] == ["new"]
    assert len(gate.asked) == 2  # the reservation "old" held went unused; "new" took another
    assert len(outcomes) == 1


@VIRTUAL
async def test_the_sender_asks_with_each_works_priority(
    tmp_path: Path, console: ConsoleProvider
) -> None:
    gate = ScriptedGate([])
    async with ChannelSender(console, channel="C", budget=BUDGET, gate=gate) as sender:
        ref = await sender.send(Post("live"), priority=Priority.NEW)
        sender.submit("k", text="progress", edit=ref)  # an intermediate edit by default
        await anyio.sleep(1)
        await sender.send(Edit(ref, "done"))  # a terminal state by default
    await console.aclose()
    assert gate.priorities == [Priority.NEW, Priority.UPDATE, Priority.TERMINAL]
