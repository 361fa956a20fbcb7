"""A row recorded already claimed (ADR 0121): the store's ``record(claimed=True)`` on every
store, and the ledger's two uses of it (``submit`` when it claims before ``deliver``, and
``record(claim=True)`` + ``deliver_now`` when the caller's send would not wait)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from bridge_core.ledger import (
    MARKER,
    Delivery,
    DeliveryLedger,
    MemoryBackend,
    MemoryLedgerStore,
    Reply,
    Schedule,
    State,
)
from bridge_core.provider import MessageRef, TransportError

from .conftest import Harness

pytestmark = pytest.mark.anyio

NOW = 1_800_000_000.0


def reply(answers: str, *, chunks: tuple[str, ...] = ()) -> Reply:
    return Reply.answering(
        profile="X",
        platform="slack",
        channel="C1",
        answers=answers,
        text=f"answer to {answers}",
        chunks=chunks,
    )


async def test_a_row_recorded_claimed_is_held_by_its_recorder(harness: Harness) -> None:
    """As its first claim would leave it: attempting, this owner, fence 1, one attempt, no
    resend spent; settled at that fence like a claimed row; the same id again is the row as
    it is, created by nobody (claimed or not)."""
    store = await harness.store(me=True)
    other = await harness.store()
    row, created = await store.record(reply("q1"), now=NOW, claimed=True)
    assert created
    assert (row.state, row.owner, row.fence, row.attempts, row.resends) == (
        State.ATTEMPTING,
        store.owner,
        1,
        1,
        0,
    )
    assert await store.get(row.id) == row
    for again in (store, other):
        for claimed in (True, False):
            existing, created_again = await again.record(reply("q1"), now=NOW + 1, claimed=claimed)
            assert (existing, created_again) == (row, False)
    assert await other.claim(row.id, fence=1, now=NOW + 2) is None  # its owner is alive
    settled = await store.settle(
        row.id, fence=1, state=State.DELIVERED, now=NOW + 3, ref=MessageRef("C1", "m1")
    )
    assert settled is not None and settled.state is State.DELIVERED
    assert settled.delivered == (MessageRef("C1", "m1"),)


async def test_claimed_and_pending_records_of_one_batch_are_each_as_asked(
    harness: Harness,
) -> None:
    """Concurrent records share statements (SQLite, PostgreSQL): each row keeps its own state."""
    store = await harness.store(me=True)
    found: dict[str, Any] = {}

    async def record(name: str, claimed: bool) -> None:
        found[name] = await store.record(reply(name), now=NOW, claimed=claimed)

    async with anyio.create_task_group() as group:
        for number in range(6):
            group.start_soon(record, f"r{number}", number % 2 == 1)
    for number in range(6):
        row, created = found[f"r{number}"]
        assert created
        stored = await store.get(row.id)
        assert stored == row
        assert (stored.state, stored.fence) == (
            (State.ATTEMPTING, 1) if number % 2 else (State.PENDING, 0)
        )


class Channel:
    """Records what reached it; ``begin()`` is awaited before each send, as a sender does."""

    def __init__(self) -> None:
        self.sent: list[Delivery] = []
        self.fail: set[str] = set()

    async def deliver(self, delivery: Delivery) -> MessageRef:
        await delivery.begin()
        if delivery.obligation_id in self.fail:
            raise TransportError("down")
        self.sent.append(delivery)
        return MessageRef(delivery.channel, f"m{len(self.sent)}")


class Counting(MemoryLedgerStore):
    """The memory store, counting the claims and proofs the ledger asks of it."""

    claims = 0
    proofs = 0

    async def claim(self, obligation_id: str, *, fence: int, now: float) -> Any:
        self.claims += 1
        return await super().claim(obligation_id, fence=fence, now=now)

    async def prove_claim(self, obligation_id: str, *, fence: int, now: float) -> Any:
        self.proofs += 1
        return await super().prove_claim(obligation_id, fence=fence, now=now)


async def ledger_on(backend: MemoryBackend, channel: Channel, *, begins: bool) -> DeliveryLedger:
    store = Counting(backend, owner="host|1|0")
    await store.open()
    return DeliveryLedger(
        store,
        deliver=channel.deliver,
        profiles={"X"},
        clock=lambda: NOW,
        schedule=Schedule(resend_delays=(30.0,)),
        deliver_begins=begins,
    )


async def test_submit_claiming_before_deliver_claims_in_the_record() -> None:
    backend, channel = MemoryBackend(), Channel()
    ledger = await ledger_on(backend, channel, begins=False)
    row = await ledger.submit(reply("s1"))
    assert row.state is State.DELIVERED and row.fence == 1 and row.attempts == 1
    assert isinstance(ledger.store, Counting) and ledger.store.claims == 0
    assert [(d.text, d.fence, d.attempt) for d in channel.sent] == [("answer to s1", 1, 1)]
    again = await ledger.submit(reply("s1"))  # a recorded id: nothing is sent again
    assert again == row and len(channel.sent) == 1


async def test_submit_claiming_at_the_turn_still_records_pending() -> None:
    backend, channel = MemoryBackend(), Channel()
    ledger = await ledger_on(backend, channel, begins=True)
    row = await ledger.submit(reply("t1"))
    assert row.state is State.DELIVERED
    assert isinstance(ledger.store, Counting) and ledger.store.claims == 1


async def test_a_row_recorded_claimed_is_sent_clean_and_later_parts_prove_the_claim() -> None:
    backend, channel = MemoryBackend(), Channel()
    ledger = await ledger_on(backend, channel, begins=True)
    row, created = await ledger.record(reply("c1", chunks=("one", "two")), claim=True)
    assert created and row.state is State.ATTEMPTING
    ended = await ledger.deliver_now(row)
    assert ended.state is State.DELIVERED and len(ended.delivered) == 2
    store = ledger.store
    assert isinstance(store, Counting)
    # no claim at the first part's begin(), one proof at the second's
    assert (store.claims, store.proofs) == (0, 1)
    assert [(d.text, d.fence) for d in channel.sent] == [("one", 1), ("two", 1)]


async def test_a_row_recorded_claimed_whose_send_fails_is_resent_labelled() -> None:
    """Its claim committed before the send, so a failed send is resent as any claimed row's:
    labelled, since the platform may have shown it."""
    backend, channel = MemoryBackend(), Channel()
    ledger = await ledger_on(backend, channel, begins=True)
    row, _ = await ledger.record(reply("f1"), claim=True)
    channel.fail.add(row.id)
    failed = await ledger.deliver_now(row)
    assert failed.state is State.FAILED
    channel.fail.clear()
    redone = await ledger.redeliver_failed("slack")
    assert redone.delivered == 1
    assert [d.text for d in channel.sent] == [f"{MARKER}\nanswer to f1"]


async def test_a_disconnected_platform_records_the_row_pending() -> None:
    backend, channel = MemoryBackend(), Channel()
    store = Counting(backend, owner="host|1|0")
    await store.open()
    ledger = DeliveryLedger(
        store,
        deliver=channel.deliver,
        profiles={"X"},
        clock=lambda: NOW,
        connected=lambda platform: False,
        deliver_begins=True,
    )
    row, created = await ledger.record(reply("d1"), claim=True)
    assert created and row.state is State.PENDING and row.fence == 0
    assert (await ledger.deliver_now(row)).state is State.PENDING  # left for the reconnect
    assert channel.sent == []
