"""The seed's test list (ADR-0069) and issue 5's rules, on virtual time over the memory log."""

from __future__ import annotations

from collections import Counter
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from bridge_core.conversation import Leave, LeaveReason, Turn

pytestmark = pytest.mark.anyio

SETTLE = 1.0
EXPIRY = 3.0
HEARTBEAT = 1.0


def new_group(harness: Any, tg: Any, **options: Any) -> Any:
    from bridge_core.ownership import MemoryLogStore

    return harness.Group(
        MemoryLogStore(clock=anyio.current_time),
        tg,
        settle=SETTLE,
        heartbeat=HEARTBEAT,
        expiry=EXPIRY,
        **options,
    )


async def settle_all(group: Any) -> None:
    await anyio.sleep(SETTLE + 0.01)


async def test_affinity_each_turn_once_and_each_conversation_to_one_member(harness: Any) -> None:
    async with anyio.create_task_group() as tg:
        group = new_group(harness, tg)
        for name in ("a", "b", "c"):
            await group.start(name)
        await settle_all(group)
        turns: list[Turn] = []
        for round_ in range(5):
            for user in range(30):
                turns.append(await group.admit(f"user{user}", f"round {round_}"))
            await anyio.sleep(0.05)
        await anyio.sleep(2.0)
        tg.cancel_scope.cancel()
    counts = Counter(d.turn.seq for d in group.deliveries)
    assert all(counts[t.seq] == 1 for t in turns), counts
    by_conversation: dict[str, set[str]] = {}
    for delivery in group.deliveries:
        by_conversation.setdefault(delivery.turn.conversation, set()).add(delivery.member)
    assert all(len(owners) == 1 for owners in by_conversation.values())
    # every member served some conversations (30 conversations over 3 members)
    assert {d.member for d in group.deliveries} == {"a", "b", "c"}
    assert all(d.answered for d in group.deliveries)


async def test_takeover_of_an_unanswered_turn_after_a_crash(harness: Any) -> None:
    async with anyio.create_task_group() as tg:
        group = new_group(harness, tg)
        await group.start("a")
        await group.start("b")
        await settle_all(group)
        author = harness.author_owned_by(group, "a")
        turn = await group.admit(author)
        group.hang.add(turn.seq)  # a receives it and dies before answering
        await anyio.sleep(0.01)
        assert [d.member for d in group.delivered(turn)] == ["a"]
        crashed_at = anyio.current_time()
        group.crash("a")
        group.hang.clear()
        await anyio.sleep(EXPIRY + 2 * HEARTBEAT + 1.0)
        tg.cancel_scope.cancel()
    deliveries = group.delivered(turn)
    assert [d.member for d in deliveries] == ["a", "b"]
    assert deliveries[1].answered
    # detected within the expiry plus one reaper period (plus the answer's own delay)
    assert deliveries[1].at - crashed_at <= EXPIRY + HEARTBEAT + 0.5
    leaves = [r for r in group.store.records if isinstance(r, Leave) and r.member == "a"]
    assert [(leave.member, leave.reason) for leave in leaves] == [("a", LeaveReason.EXPIRED)]


async def test_an_answered_turn_is_never_delivered_again(harness: Any) -> None:
    async with anyio.create_task_group() as tg:
        group = new_group(harness, tg)
        await group.start("a")
        await group.start("b")
        await settle_all(group)
        author = harness.author_owned_by(group, "a")
        answered = await group.admit(author, "first")
        await anyio.sleep(0.5)  # a answers it
        unanswered = await group.admit(author, "second")
        group.hang.add(unanswered.seq)
        await anyio.sleep(0.05)
        group.crash("a")
        group.hang.clear()
        await anyio.sleep(EXPIRY + 3 * HEARTBEAT)
        tg.cancel_scope.cancel()
    assert [(d.member, d.answered) for d in group.delivered(answered)] == [("a", True)]
    assert [d.member for d in group.delivered(unanswered)] == ["a", "b"]


async def test_dead_but_listed_member_gap_is_taken_over(harness: Any) -> None:
    """Turns committed while a dead member is still listed are passed to it by everyone; its
    expiry record hands them to the survivor, in order, none lost."""
    async with anyio.create_task_group() as tg:
        group = new_group(harness, tg)
        await group.start("a")
        await group.start("b")
        await settle_all(group)
        author = harness.author_owned_by(group, "a")
        group.crash("a")
        gap = []
        for i in range(4):
            gap.append(await group.admit(author, f"while a is dead {i}"))
            await anyio.sleep(0.3)
        # nobody delivered them yet: they are a's, and a is dead
        assert not any(group.delivered(t) for t in gap)
        await anyio.sleep(EXPIRY + 2 * HEARTBEAT + 4 * group.answer_delay)
        tg.cancel_scope.cancel()
    got = [(d.member, d.turn.seq, d.answered) for d in group.deliveries]
    assert got == [("b", t.seq, True) for t in gap]


async def test_join_during_the_settle_delay_takes_nothing(harness: Any) -> None:
    async with anyio.create_task_group() as tg:
        group = new_group(harness, tg)
        await group.start("a")
        await settle_all(group)
        await group.start("b")
        # b is present but not eligible: a still owns everything
        during = [await group.admit(f"user{i}") for i in range(40)]
        await anyio.sleep(SETTLE + 0.5)
        after = [await group.admit(f"user{i}") for i in range(40)]
        await anyio.sleep(1.0)
        tg.cancel_scope.cancel()
    assert all([d.member for d in group.delivered(t)] == ["a"] for t in during)
    owners_after = Counter(group.delivered(t)[0].member for t in after)
    assert all(len(group.delivered(t)) == 1 for t in after)
    assert owners_after["b"] > 5 and owners_after["a"] > 5


async def test_join_never_duplicates_a_turn_being_processed(harness: Any) -> None:
    """Turns a is still answering when b joins (b reads them in its backlog) and turns committed
    before b's since stay a's: b never delivers them."""
    async with anyio.create_task_group() as tg:
        group = new_group(harness, tg, answer_delay=0.5)
        await group.start("a")
        await settle_all(group)
        before_join = [await group.admit(f"user{i}") for i in range(30)]
        await group.start("b")
        during_settle = [await group.admit(f"user{i}") for i in range(30)]
        await anyio.sleep(SETTLE + 1.0)
        tg.cancel_scope.cancel()
    for turn in [*before_join, *during_settle]:
        assert [(d.member, d.answered) for d in group.delivered(turn)] == [("a", True)]


async def test_join_after_the_settle_delay_moves_only_the_newcomers_conversations(
    harness: Any,
) -> None:
    async with anyio.create_task_group() as tg:
        group = new_group(harness, tg)
        await group.start("a")
        await group.start("b")
        await settle_all(group)
        before = {t.conversation: None for t in [await group.admit(f"u{i}") for i in range(90)]}
        await anyio.sleep(0.5)
        owner_before = {d.turn.conversation: d.member for d in group.deliveries}
        await group.start("c")
        await settle_all(group)
        mark = len(group.deliveries)
        for i in range(90):
            await group.admit(f"u{i}")
        await anyio.sleep(0.5)
        tg.cancel_scope.cancel()
    owner_after = {d.turn.conversation: d.member for d in group.deliveries[mark:]}
    assert set(owner_after) == set(before)
    moved = {c for c in before if owner_after[c] != owner_before[c]}
    assert moved and all(owner_after[c] == "c" for c in moved)
    assert 15 <= len(moved) <= 45  # about a third


async def test_busy_is_relayed_to_the_end_user(harness: Any) -> None:
    async with anyio.create_task_group() as tg:
        group = new_group(harness, tg)
        await group.start("a")
        await settle_all(group)
        turn_id = group.store.next_seq
        group.busy.add(turn_id)
        turn = await group.admit("someone")
        assert turn.seq == turn_id
        await anyio.sleep(0.5)
        tg.cancel_scope.cancel()
    assert group.busy_notices == [("a", turn, "busy, try again in a minute")]
    assert group.members["a"].statistics().busy == 1


async def test_graceful_leave_hands_over_at_once_and_drains_in_flight(harness: Any) -> None:
    async with anyio.create_task_group() as tg:
        group = new_group(harness, tg, answer_delay=0.4)
        await group.start("a")
        await group.start("b")
        await settle_all(group)
        author = harness.author_owned_by(group, "a")
        in_flight = await group.admit(author, "one")
        await anyio.sleep(0.1)
        group.members["a"].stop()  # a finishes "one", then leaves
        await anyio.sleep(0.6)
        left_at = anyio.current_time()
        later = await group.admit(author, "two")
        await anyio.sleep(0.6)
        tg.cancel_scope.cancel()
    assert [(d.member, d.answered) for d in group.delivered(in_flight)] == [("a", True)]
    assert [d.member for d in group.delivered(later)] == ["b"]
    assert group.delivered(later)[0].at - left_at < 0.1  # no expiry wait
    leaves = [r for r in group.store.records if isinstance(r, Leave) and r.member == "a"]
    assert [(leave.member, leave.reason) for leave in leaves] == [("a", LeaveReason.GRACEFUL)]


async def test_a_member_that_cannot_heartbeat_stops_delivering_and_rejoins_as_new(
    harness: Any,
) -> None:
    async with anyio.create_task_group() as tg:
        group = new_group(harness, tg)
        a = await group.start("a")
        await group.start("b")
        await settle_all(group)
        author = harness.author_owned_by(group, "a")
        group.handles["a"].heartbeat_fails = True
        await anyio.sleep(0.8 * EXPIRY + 0.01)
        assert not a.delivering
        turn = await group.admit(author)
        await anyio.sleep(0.1)
        assert not group.delivered(turn)  # a owns it but may not deliver
        await anyio.sleep(EXPIRY)  # still failing: b's reaper expires a
        assert not group.delivered(turn) or group.delivered(turn)[0].member == "b"
        group.handles["a"].heartbeat_fails = False
        await anyio.sleep(2 * HEARTBEAT)
        tg.cancel_scope.cancel()
    # b expired a and took the turn over; a saw its expiry and joined again under a new id
    assert [d.member for d in group.delivered(turn)] == ["b"]
    assert a.statistics().rejoins == 1 and a.current_id == "a~1"
    joins = [r for r in group.store.records if type(r).__name__ == "Join"]
    rejoin = next(j for j in joins if j.member == "a~1")
    assert rejoin.since == pytest.approx(rejoin.inserted_at + SETTLE)


async def test_a_turn_that_moved_while_its_handler_waited_is_no_longer_its_own(
    harness: Any,
) -> None:
    # A connected agent's handler may wait (for a free slot on its socket) before it starts
    # the turn; meanwhile its member can be expelled and the turn taken over. It asks again.
    async with anyio.create_task_group() as tg:
        group = new_group(harness, tg, answer_delay=60.0)  # every handler is slow
        a = await group.start("a")
        b = await group.start("b")
        await settle_all(group)
        author = harness.author_owned_by(group, "a")
        turn = await group.admit(author)
        await anyio.sleep(0.1)
        assert [d.member for d in group.delivered(turn)] == ["a"]
        assert a.still_owns(turn) and not b.still_owns(turn)
        group.handles["a"].heartbeat_fails = True
        await anyio.sleep(2 * EXPIRY)  # b's reaper expires a, and b takes the turn over
        group.handles["a"].heartbeat_fails = False
        await anyio.sleep(2 * HEARTBEAT)  # a learns it was expelled
        assert [d.member for d in group.delivered(turn)] == ["a", "b"]
        assert not a.still_owns(turn) and b.still_owns(turn)
        tg.cancel_scope.cancel()


async def test_turns_left_unanswered_by_a_crashed_group_are_answered_after_restart(
    harness: Any,
) -> None:
    async with anyio.create_task_group() as tg:
        group = new_group(harness, tg)
        await group.start("a")
        await settle_all(group)
        group.hang.update(range(group.store.next_seq, group.store.next_seq + 100))
        pending = [await group.admit(f"u{i}") for i in range(5)]
        await anyio.sleep(0.1)
        group.crash("a")  # the whole gateway dies: nobody is left to take over
        orphan_admitted_while_down = await group.admit("u-late")
        group.hang.clear()
        await anyio.sleep(10.0)
        await group.start("a2")  # the restarted gateway
        await anyio.sleep(EXPIRY + 2 * HEARTBEAT + 1.0)
        tg.cancel_scope.cancel()
    for turn in [*pending, orphan_admitted_while_down]:
        got = [d.member for d in group.delivered(turn) if d.answered]
        assert got == ["a2"], (turn, got)


async def test_passed_memory_is_bounded_oldest_dropped(harness: Any) -> None:
    async with anyio.create_task_group() as tg:
        group = new_group(harness, tg)
        await group.start("a")
        b = await group.start("b", max_conversations=10)
        await settle_all(group)
        group.hang.update(range(group.store.next_seq, group.store.next_seq + 1000))
        for i in range(50):
            await group.admit(f"user{i}")
        await anyio.sleep(0.1)
        assert b.view is not None
        assert len({c for c in b.view._pending}) == 10
        assert b.view.statistics().conversations_dropped >= 40
        tg.cancel_scope.cancel()


async def test_a_heartbeat_blip_shorter_than_the_expiry_only_delays_delivery(
    harness: Any,
) -> None:
    async with anyio.create_task_group() as tg:
        # beats every 0.2 s: the blip (at most 0.2 + 2.41 + 0.05 s) ends before the expiry
        group = new_group(harness, tg)
        group.heartbeat = 0.2
        a = await group.start("a")
        await group.start("b")
        await settle_all(group)
        author = harness.author_owned_by(group, "a")
        group.handles["a"].heartbeat_fails = True
        await anyio.sleep(0.8 * EXPIRY + 0.01)
        turn = await group.admit(author)
        await anyio.sleep(0.05)
        assert not a.delivering and not group.delivered(turn)
        group.handles["a"].heartbeat_fails = False  # back before b's reaper expires it
        await anyio.sleep(HEARTBEAT + 0.5)
        tg.cancel_scope.cancel()
    assert [(d.member, d.answered) for d in group.delivered(turn)] == [("a", True)]
    assert a.statistics().rejoins == 0 and a.current_id == "a"
    expired = [r for r in group.store.records if isinstance(r, Leave) and r.member == "a"]
    assert [leave.reason for leave in expired] == [LeaveReason.GRACEFUL]  # at the end only


async def test_a_member_that_cannot_reach_the_log_at_start_joins_when_it_can(
    harness: Any,
) -> None:
    from bridge_core.ownership import LogUnavailable

    class DownAtFirst(harness.CrashableLog):  # type: ignore[name-defined,misc]
        failures = 2

        async def join(self, member: str, *, settle: float) -> Any:
            if self.failures:
                self.failures -= 1
                raise LogUnavailable("test: Redis is restarting")
            return await super().join(member, settle=settle)

    async with anyio.create_task_group() as tg:
        group = new_group(harness, tg)
        from bridge_core.ownership import AgentGroupMember

        member = AgentGroupMember(
            DownAtFirst(group.store),
            member_id="late",
            on_turn=lambda turn, history: anyio.lowlevel.checkpoint(),
            settle=0.0,
            heartbeat=HEARTBEAT,
            exact_id=True,
        )
        tg.start_soon(member.run)
        with anyio.fail_after(10):
            await member.ready.wait()
        assert member.statistics().log_errors == 2 and member.current_id == "late~2"
        tg.cancel_scope.cancel()


async def test_a_failing_handler_or_busy_notice_does_not_stop_the_member(
    harness: Any, caplog: pytest.LogCaptureFixture
) -> None:
    async with anyio.create_task_group() as tg:
        group = new_group(harness, tg)
        a = await group.start("a")
        await settle_all(group)
        group.broken.add(group.store.next_seq)
        broken = await group.admit("x")
        later = await group.admit("x")
        await anyio.sleep(0.5)
        tg.cancel_scope.cancel()
    assert [d.member for d in group.delivered(broken)] == ["a"]
    assert [(d.member, d.answered) for d in group.delivered(later)] == [("a", True)]
    assert a.statistics().handler_errors == 1
    assert any("on_turn failed" in r.getMessage() for r in caplog.records)
