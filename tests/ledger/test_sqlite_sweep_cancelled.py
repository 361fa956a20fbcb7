"""A SQLite sweep cancelled between its commits (ADR 0180): the batch it had chosen while the
last commit synced, never claimed, is not left marked as being sent, nor are the rows it had
claimed or sent; so a later sweep of the same ledger is not told to skip them."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from bridge_core.ledger import Delivery, DeliveryLedger, Obligation, open_store
from bridge_core.ledger.owner import Owner
from bridge_core.ledger.sqlite import SQLiteLedgerStore
from bridge_core.provider import MessageRef

ROWS = 1_600  # several batches of 250
GONE = str(Owner("gone-host", 1, "0"))  # an owner that runs nowhere here


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # real time (the writer is a thread); its COMMIT hint is asyncio's


def seed(path: Path) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN")
    conn.executemany(
        "INSERT INTO ledger (id, profile, platform, channel, text, state, owner, created_at, "
        "updated_at) VALUES (?, 'X', 'console', 'C1', 'stored reply', 'pending', ?, ?, ?)",
        ((f"r{index:05d}", GONE, 1_000.0 + index, 1_000.0) for index in range(ROWS)),
    )
    conn.execute("COMMIT")
    conn.close()


@pytest.mark.anyio
# After the first and the third claims: the batches those commits claim leave a page's second
# half unclaimed, so no page is read beside them, and the next batch is always chosen early.
@pytest.mark.parametrize("claims_before_cancel", [1, 3])
async def test_a_sweep_cancelled_after_a_claim_leaves_no_row_marked_as_being_sent(
    tmp_path: Path, claims_before_cancel: int
) -> None:
    path = tmp_path / "ledger.db"
    store = await open_store(path)
    assert isinstance(store, SQLiteLedgerStore)
    await store.aclose()
    seed(path)
    store = await open_store(path)
    assert isinstance(store, SQLiteLedgerStore)
    sent: list[str] = []

    async def deliver(delivery: Delivery) -> MessageRef:
        sent.append(delivery.obligation_id)
        return MessageRef(delivery.channel, delivery.obligation_id)

    ledger = DeliveryLedger(store, deliver=deliver, profiles={"X"}, clock=lambda: 2_000.0)
    claim_read = store.claim_read
    claimed = 0
    chosen_early: list[bool] = []

    async def cancelling_claim_read(rows: Sequence[Obligation], **hints: Any) -> Any:
        # The claim's COMMIT hint comes before its result, and the sweep, once its sends are
        # done, chooses the next batch on that hint; this claim's caller waits for the claim,
        # so the sweep is cancelled with a batch chosen and not claimed.
        nonlocal claimed
        result = await claim_read(rows, **hints)
        claimed += 1
        if claimed == claims_before_cancel:
            following = f"r{int(rows[-1].id[1:]) + 1:05d}"  # the next batch's first row
            for _ in range(1_000):
                if following in ledger._sending:
                    break
                await anyio.lowlevel.checkpoint()
            chosen_early.append(following in ledger._sending)
            scope.cancel()
        return result

    store.claim_read = cancelling_claim_read  # type: ignore[method-assign]
    with anyio.CancelScope() as scope:
        await ledger.boot_sweep()
    assert scope.cancelled_caught
    assert chosen_early == [True]  # the cancel came with a batch chosen and not yet claimed
    assert not ledger._sending  # nothing chosen, claimed or sent is left marked
    assert len(sent) < ROWS and len(set(sent)) == len(sent)
    await store.aclose()
