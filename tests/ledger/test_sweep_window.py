"""A batched sweep's window: each row is sent only after the claim that covers it answered, and at
most a page of rows is ever claimed and not yet sent (ADR 0110), however slow the store's claims
are against the sends. On virtual time over the memory store."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio
import pytest
import trio.testing

from bridge_core.ledger import Delivery, DeliveryLedger, MemoryBackend, MemoryLedgerStore, Reply
from bridge_core.ledger.model import Obligation
from bridge_core.provider import MessageRef

pytestmark = pytest.mark.anyio

ROWS = 1_300  # two full pages and a part, of 500 rows (batches of 250)
PAGE = 500


@pytest.fixture
def anyio_backend() -> tuple[str, dict[str, Any]]:
    return ("trio", {"clock": trio.testing.MockClock(autojump_threshold=0)})


class SlowClaims(MemoryLedgerStore):
    """Claims that take ``claim_time`` to answer; every id asked for counts as claimed from the
    call on (the store may commit it at any moment after)."""

    def __init__(self, backend: MemoryBackend, *, claim_time: float) -> None:
        super().__init__(backend, owner="sweeper|1|0")
        self.claim_time = claim_time
        self.asked: set[str] = set()
        self.answered: set[str] = set()

    async def claim_many(
        self, items: Sequence[tuple[str, int]], *, now: float
    ) -> list[Obligation | None]:
        self.asked.update(obligation_id for obligation_id, _ in items)
        await anyio.sleep(self.claim_time)
        rows = await super().claim_many(items, now=now)
        self.answered.update(row.id for row in rows if row is not None)
        return rows


@pytest.mark.parametrize("claim_time, send_time", [(0.0, 0.0), (1.0, 0.0), (0.0, 0.01)])
async def test_a_row_is_sent_after_its_claim_and_at_most_a_page_is_claimed_unsent(
    claim_time: float, send_time: float
) -> None:
    backend = MemoryBackend()
    gone = MemoryLedgerStore(backend, owner="gone|1|0")
    await gone.open()
    for index in range(ROWS):
        reply = Reply.answering(
            profile="X", platform="console", channel="C1", answers=f"m{index:05d}", text="hi"
        )
        await gone.record(reply, now=1_800_000_000.0 + index)
    backend.kill("gone|1|0")
    store = SlowClaims(backend, claim_time=claim_time)
    await store.open()
    sent: list[str] = []
    widest = 0

    async def deliver(delivery: Delivery) -> MessageRef:
        nonlocal widest
        assert delivery.obligation_id in store.answered, "sent before its claim answered"
        sent.append(delivery.obligation_id)
        widest = max(widest, len(store.asked) - len(sent))
        if send_time:
            await anyio.sleep(send_time)
        return MessageRef(delivery.channel, delivery.obligation_id)

    ledger = DeliveryLedger(store, deliver=deliver, profiles={"X"}, clock=lambda: 1_800_002_000.0)
    report = await ledger.boot_sweep()

    assert report.delivered == ROWS and report.claimed == ROWS
    created = [backend.rows[obligation_id].created_at for obligation_id in sent]
    assert created == sorted(created) and len(set(sent)) == ROWS  # in order, each once
    assert 0 < widest <= PAGE
    assert all(row.state.final for row in backend.rows.values())
