"""The last attempt of a parked reply goes out when its channel proves healthy (ADR 0029).

A reply whose in-process resends are spent (30 s, then 2 min) is left ``failed`` without a timer
for the next start. A gateway that runs for weeks may never restart in time; so the first
successful send (or probe) on that channel in this process gives the reply its last attempt.
The budget stays the seed's: three resends, then ``abandoned``. Virtual time, the memory store,
the shipped ``ChannelSender`` between the ledger and the platform, wired as the gateway wires it.
"""

from __future__ import annotations

from functools import partial

import anyio
import pytest
from bridge_slack import SLACK_BUDGET

from bridge_core.ledger import (
    Delivery,
    DeliveryLedger,
    MemoryLedgerStore,
    Reply,
    State,
    is_marked,
)
from bridge_core.provider import Capabilities, ChatProvider, MessageRef, TransportError
from bridge_core.sending import ChannelSender, Post
from bridge_core.testing.clock import virtual_backend

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> tuple[str, dict[str, object]]:
    return virtual_backend()


class Outage(ChatProvider):
    """Refuses every post whose text contains ``down`` with a 503 while ``failing`` is set."""

    name = "outage"
    capabilities = Capabilities(edit=False, max_length=4000, probe=False)

    def __init__(self) -> None:
        self.failing = True
        self.posted: list[tuple[float, str]] = []
        self.refused: list[float] = []

    async def post(self, channel: str, text: str, *, thread: str | None = None) -> MessageRef:
        if self.failing and "reply" in text:
            self.refused.append(anyio.current_time())
            raise TransportError("503 from the platform")
        self.posted.append((anyio.current_time(), text))
        return MessageRef(channel, f"m{len(self.posted)}")

    async def edit(self, ref: MessageRef, text: str) -> MessageRef:
        raise NotImplementedError


async def _parked_reply(outage: Outage, sender: ChannelSender, ledger: DeliveryLedger) -> str:
    row = await ledger.submit(
        Reply.answering(profile="X", platform="p", channel="C1", answers="t1", text="the reply")
    )
    assert row.state is State.FAILED
    await anyio.sleep(30 + 120 + 60)  # both in-process resends are spent by now
    parked = await ledger.store.get(row.id)
    assert parked is not None
    assert (parked.state, parked.next_attempt_at, parked.resends) == (State.FAILED, None, 2)
    assert len(outage.refused) == 3 and ledger.timers == 0
    return row.id


def _wired(outage: Outage) -> tuple[ChannelSender, DeliveryLedger]:
    sender = ChannelSender(outage, channel="C1", budget=SLACK_BUDGET)

    async def deliver(delivery: Delivery) -> MessageRef:
        return await sender.send(Post(delivery.text, begin=delivery.begin))

    ledger = DeliveryLedger(
        MemoryLedgerStore(), deliver=deliver, profiles={"X"}, deliver_begins=True
    )
    sender.health.on_proven(partial(ledger.channel_proven, "X", "C1"))
    return sender, ledger


async def test_a_spent_reply_goes_out_when_its_channel_next_takes_a_send() -> None:
    outage = Outage()
    sender, ledger = _wired(outage)
    async with anyio.create_task_group() as group:
        await ledger.store.open()
        group.start_soon(sender.run)
        await group.start(ledger.run)
        obligation = await _parked_reply(outage, sender, ledger)
        await anyio.sleep(3600)  # hours pass: nothing proves the channel healthy, nothing is sent
        assert len(outage.refused) == 3 and outage.posted == []
        outage.failing = False
        sender.submit("status", text="an agent's status")  # the channel takes a send again
        with anyio.fail_after(60):
            while len(outage.posted) < 2:  # noqa: ASYNC110 (virtual time)
                await anyio.sleep(0.1)
        row = await ledger.store.get(obligation)
        group.cancel_scope.cancel()
    assert row is not None and row.state is State.DELIVERED
    assert (row.resends, row.attempts) == (3, 4)  # the seed's budget: three resends
    status, reply = outage.posted
    assert status[1] == "an agent's status"
    assert is_marked(reply[1]) and reply[1].endswith("the reply")
    assert reply[0] - status[0] <= 2.0  # at the next slot the budget allows, not at a restart


async def test_a_last_attempt_that_fails_abandons_the_reply() -> None:
    outage = Outage()
    sender, ledger = _wired(outage)
    async with anyio.create_task_group() as group:
        await ledger.store.open()
        group.start_soon(sender.run)
        await group.start(ledger.run)
        obligation = await _parked_reply(outage, sender, ledger)
        sender.submit("status", text="an agent's status")  # succeeds; the reply still fails
        await anyio.sleep(60)
        row = await ledger.store.get(obligation)
        await anyio.sleep(3600)
        group.cancel_scope.cancel()
    assert row is not None and row.state is State.ABANDONED and row.resends == 3
    assert len(outage.refused) == 4  # three resends after the first send, never a fifth try
