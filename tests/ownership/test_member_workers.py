"""A member's delivery workers (ADR 0131): at most ``max_concurrent`` turns in flight, one turn
of a conversation at a time and in log order, each turn delivered once, conversations taking
turns when every worker is busy."""

from __future__ import annotations

from collections import Counter
from typing import Any

import anyio
import pytest

from bridge_core.conversation import Turn
from bridge_core.ownership import AgentGroupMember, MemoryConversationLog, MemoryLogStore
from bridge_core.provider import InboundMessage

pytestmark = pytest.mark.anyio


async def _serve(max_concurrent: int, turns_per_conversation: int, conversations: int) -> Any:
    store = MemoryLogStore()
    log = MemoryConversationLog(store, channel="C")
    admitter = MemoryConversationLog(store, channel="C")
    total = turns_per_conversation * conversations
    delivered: list[Turn] = []
    in_flight: Counter[str] = Counter()
    peak = {"turns": 0, "per_conversation": 0}
    done = anyio.Event()

    async def on_turn(turn: Turn, history: Any) -> None:
        in_flight[turn.conversation] += 1
        peak["turns"] = max(peak["turns"], sum(in_flight.values()))
        peak["per_conversation"] = max(peak["per_conversation"], in_flight[turn.conversation])
        await anyio.sleep(0.5)
        in_flight[turn.conversation] -= 1
        delivered.append(turn)
        if len(delivered) == total:
            done.set()

    member = AgentGroupMember(
        log, member_id="m", on_turn=on_turn, settle=0.0, max_concurrent=max_concurrent
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(member.run)
        await member.ready.wait()
        for i in range(turns_per_conversation):
            for author in range(conversations):
                await admitter.admit(
                    InboundMessage(
                        message_id=f"m{i}-{author}",
                        channel="C",
                        author=f"u{author}",
                        text="hi",
                        at=0.0,
                    )
                )
        with anyio.fail_after(600):
            await done.wait()
        member.stop()
    return delivered, peak, member


async def test_turns_in_flight_are_bounded_and_each_conversation_keeps_its_order() -> None:
    delivered, peak, member = await _serve(
        max_concurrent=3, turns_per_conversation=4, conversations=7
    )
    assert len(delivered) == 28 and len({turn.seq for turn in delivered}) == 28
    assert peak["turns"] == 3  # the limit is reached and never passed
    assert peak["per_conversation"] == 1
    by_conversation: dict[str, list[int]] = {}
    for turn in delivered:
        by_conversation.setdefault(turn.conversation, []).append(turn.seq)
    assert all(seqs == sorted(seqs) for seqs in by_conversation.values())
    assert member.statistics().delivered == 28
    assert member._workers == 3  # workers are reused, not one per turn


async def test_busy_workers_let_every_ready_conversation_take_its_turn() -> None:
    # one worker, three conversations of three turns each, admitted round by round: the
    # conversations alternate instead of one being drained before the others start
    delivered, _peak, _member = await _serve(
        max_concurrent=1, turns_per_conversation=3, conversations=3
    )
    order = [turn.author for turn in delivered]
    assert sorted(order[:3]) == ["u0", "u1", "u2"]
    assert sorted(order[3:6]) == ["u0", "u1", "u2"]


async def test_max_concurrent_below_one_is_refused() -> None:
    log = MemoryConversationLog(MemoryLogStore(), channel="C")

    async def on_turn(turn: Turn, history: Any) -> None:
        return None

    with pytest.raises(ValueError, match="max_concurrent"):
        AgentGroupMember(log, member_id="m", on_turn=on_turn, max_concurrent=0)


async def test_a_turn_whose_conversation_the_view_dropped_is_still_answered() -> None:
    # The view keeps ``max_conversations`` conversations with unanswered turns; the member's
    # queue keeps every turn it was given. A connected agent's handler asks ``still_owns``
    # before it starts a turn (AgentConnection._hold): a turn whose conversation the view had
    # dropped was refused there, and nobody else answered it (every member drops it alike).
    store = MemoryLogStore()
    log = MemoryConversationLog(store, channel="C")
    answered: list[int] = []
    refused: list[int] = []
    all_taken = anyio.Event()
    member: AgentGroupMember

    async def on_turn(turn: Turn, history: Any) -> None:
        if member.still_owns(turn):
            await anyio.sleep(1.0)  # a slow agent, one turn at a time: the rest wait queued
            answered.append(turn.seq)
        else:
            refused.append(turn.seq)
        if len(answered) + len(refused) == 6:
            all_taken.set()

    member = AgentGroupMember(
        log, member_id="m", on_turn=on_turn, settle=0.0, max_concurrent=1, max_conversations=3
    )
    admitted = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(member.run)
        await member.ready.wait()
        for author in range(6):
            turn = await log.admit(
                InboundMessage(
                    message_id=f"m{author}", channel="C", author=f"u{author}", text="hi", at=0.0
                )
            )
            assert turn is not None
            admitted.append(turn.seq)
        with anyio.fail_after(600):
            await all_taken.wait()
        member.stop()
    assert member.view is not None and member.view.statistics().conversations_dropped >= 3
    assert sorted(answered) == admitted and refused == []
