"""The SQLite ledger's multi-row statements bind a stand-in for ``None`` (ADR 0170): every value
the ledger writes, ``None`` and the strings and numbers nearest its stand-ins, reads back as
written, whether the row is known to the store (its short statements) or read cold."""

from __future__ import annotations

import pytest

from bridge_core.ledger import Reply, State
from bridge_core.provider import MessageRef

from .conftest import Harness

pytestmark = pytest.mark.anyio

TEXTS = [None, "0", "", "x"]  # None, then the texts nearest its stand-in (integer 0)


@pytest.mark.parametrize("cold", [False, True], ids=["known", "cold"])
async def test_nulls_and_their_neighbours_read_back_as_written(
    harness: Harness, cold: bool
) -> None:
    if harness.kind != "sqlite":
        pytest.skip("SQLite's statements only")
    store = await harness.store(me=True)
    for index, text in enumerate(TEXTS):
        key = f"k{index}"
        reply = Reply(
            obligation_id=key,
            profile="X",
            platform="p",
            channel="c",
            text="body",
            thread=text,
            reply_to=text,
        )
        row, created = await store.record(reply, now=1.0, claimed=True)
        assert row.thread == text and row.reply_to == text
        assert created
        if cold:
            store._known.clear()  # type: ignore[attr-defined]
        ref = MessageRef("c", "m0", text)
        progressed = await store.progress(key, fence=1, ref=ref, now=2.0)
        assert progressed is not None and progressed.delivered == (ref,)
        assert progressed.state is State.ATTEMPTING and progressed.last_error is None
        if cold:
            store._known.clear()  # type: ignore[attr-defined]
        # a failed send: its next attempt at 0.0 (the real stand-in's neighbour), the error
        failed = await store.settle(
            key,
            fence=1,
            state=State.FAILED,
            now=3.0,
            next_attempt_at=0.0 if index % 2 else None,
            penalty=bool(index % 2),
            last_error=text,
        )
        assert failed is not None
        stored = await store.get(key)
        assert stored is not None
        for seen in (failed, stored):
            assert seen.thread == text and seen.reply_to == text
            assert seen.last_error == text
            assert seen.next_attempt_at == (0.0 if index % 2 else None)
            assert seen.penalty is bool(index % 2)
            assert seen.state is State.FAILED
            assert seen.delivered == (ref,)
        # a later held update with no error keeps the one stored
        again = await store.claim(key, fence=1, now=4.0)
        assert again is not None
        kept = await store.settle(key, fence=2, state=State.DELIVERED, now=5.0, ref=ref)
        assert kept is not None and kept.last_error == text
        stored = await store.get(key)
        assert stored is not None and stored.next_attempt_at is None
        assert stored.delivered == (ref, ref) and stored.thread == text
