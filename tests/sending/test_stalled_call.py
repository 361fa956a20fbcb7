"""A send whose call stalls (a descheduled process, a slow loop) reaches the platform late: the
budget and the edit spacing count it from the end of its call, so the sends after it keep the
budget where the platform counts, on arrival (ADR 0144).

Each call here arrives at the platform at its very end, the worst case the sender cannot rule
out; on virtual time the stall is exact. Counted from the grant, the bucket refilled to its
burst during the stall and a whole burst followed the late arrival at once.
"""

from __future__ import annotations

import anyio
import pytest

from bridge_core.provider import MessageRef, MessageRejected, SendBudget, Window
from bridge_core.providers.console import ConsoleProvider
from bridge_core.sending import BudgetGate, ChannelSender, Post, Priority
from bridge_core.testing.budget import TranscriptEntry, check_budget, check_edit_spacing

pytestmark = pytest.mark.anyio
C = "chan"
BUDGET = SendBudget(burst=3, per_second=5.0, windows=(Window(5, 2.0),), edit_spacing=0.5)


class LatePlatform:
    """Calls that take ``stall`` seconds when asked to and arrive at their end."""

    def __init__(self) -> None:
        self.arrivals: list[TranscriptEntry] = []
        self.stalls: list[float] = []
        self.fail = False

    async def post(self, channel: str, text: str, thread: str | None) -> MessageRef:
        await self._arrive(text, message_id=None)
        return MessageRef(channel, f"m{len(self.arrivals)}")

    async def edit(self, ref: MessageRef, text: str) -> MessageRef:
        await self._arrive(text, message_id=ref.message_id)
        return ref

    async def _arrive(self, text: str, *, message_id: str | None) -> None:
        await anyio.sleep(self.stalls.pop(0) if self.stalls else 0.0)
        self.arrivals.append(
            TranscriptEntry(anyio.current_time(), "post", C, message_id=message_id, text=text)
        )
        if self.fail:
            raise MessageRejected("refused after it arrived")


async def test_a_stalled_send_is_not_followed_by_a_whole_burst(console: ConsoleProvider) -> None:
    platform = LatePlatform()
    platform.stalls = [0.0, 0.0, 0.0, 1.5]  # the fourth call stalls while the bucket refills
    async with ChannelSender(console, channel=C, budget=BUDGET) as sender:
        for n in range(10):
            await sender.send(Post(f"p{n}", call=platform.post), priority=Priority.TERMINAL)
    assert len(platform.arrivals) == 10
    assert check_budget(platform.arrivals, BUDGET) == []


async def test_a_failed_call_counts_from_its_end_too(console: ConsoleProvider) -> None:
    """Every attempt the platform saw counts (ADR 0011): a refused one (no pause follows) too."""
    platform = LatePlatform()
    platform.stalls = [1.5]
    platform.fail = True
    async with ChannelSender(console, channel=C, budget=BUDGET) as sender:
        with pytest.raises(MessageRejected):
            await sender.send(Post("refused", call=platform.post))
        platform.fail = False
        for n in range(4):
            await sender.send(Post(f"p{n}", call=platform.post))
    assert check_budget(platform.arrivals, BUDGET) == []


async def test_a_stalled_edit_spaces_the_next_edit_from_its_arrival(
    console: ConsoleProvider,
) -> None:
    platform = LatePlatform()
    ref = MessageRef(C, "m1")
    platform.stalls = [0.4]
    async with ChannelSender(console, channel=C, budget=BUDGET) as sender:
        done = anyio.Event()
        sender.submit("k", text="first", edit=ref, call=platform.edit, on_outcome=lambda _: None)
        await anyio.sleep(0.1)  # the first edit is in its call
        sender.submit(
            "k", text="second", edit=ref, call=platform.edit, on_outcome=lambda _: done.set()
        )
        await done.wait()
    assert [e.text for e in platform.arrivals] == ["first", "second"]
    assert check_edit_spacing(platform.arrivals, BUDGET.edit_spacing) == []


def test_the_gate_counts_a_send_from_its_end() -> None:
    gate = BudgetGate(SendBudget(burst=3, per_second=5.0, windows=(Window(2, 1.0),)))
    gate.record(0.0)
    gate.sent(2.0)  # the bucket refilled to 3 meanwhile; the send takes one at 2.0
    assert gate.delay(2.0) == 0.0
    gate.record(2.0)
    gate.sent(2.0)
    assert gate.delay(2.0) == pytest.approx(1.0)  # two sends at 2.0: the window waits 1 s
    gate = BudgetGate(SendBudget(burst=3, per_second=5.0))
    for _ in range(3):
        gate.record(0.0)
        gate.sent(0.0)
    assert gate.delay(0.0) == pytest.approx(0.2)
    gate.record(0.2)
    gate.sent(10.0)  # refilled to 3 during the call, less the send's own token
    for _ in range(2):
        assert gate.delay(10.0) == 0.0
        gate.record(10.0)
        gate.sent(10.0)
    assert gate.delay(10.0) == pytest.approx(0.2)
