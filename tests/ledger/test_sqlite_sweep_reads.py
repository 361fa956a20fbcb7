"""The SQLite sweep's page reads and claims as read (ADR 0176): a page read through ``take_row``
gives the rows a plain ``SELECT`` gives, value for value and in order, and a row claimed as read
is stored exactly as ``claimed_row`` builds it."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from bridge_core.ledger import Obligation, Reply, State
from bridge_core.ledger.owner import Owner
from bridge_core.ledger.rows import COLUMNS, claimed_row, in_page_order, to_obligation
from bridge_core.ledger.sqlite import SQLiteLedgerStore
from bridge_core.ledger.sqlreader import TakenRows
from bridge_core.ledger.store import CLAIMABLE_STATES, Scope
from bridge_core.provider import MessageRef

pytestmark = pytest.mark.anyio

GONE = str(Owner("gone-host", 1, "0"))  # an owner that runs nowhere here
NOW = 1796234600.0  # after every row's next attempt
SCOPE = Scope(owners="dead", states=CLAIMABLE_STATES, due="due_or_unset", profiles={"X"})


def seed(path: Path) -> None:
    """Rows a dead process left, with the values a page must carry exactly: times with every
    digit a double holds, tiny and negative times, texts with quotes, newlines and characters
    outside the BMP, chunks and refs as stored JSON, NULLs, every open state."""
    conn = sqlite3.connect(path, isolation_level=None)
    rows = [
        ("a", "pending", 0, 0, 0, 1796234418.9625902, 1796234418.9625902, None, None, 0, "", ""),
        ("b", "failed", 2, 1, 3, 1796234418.9625903, 0.1, 1796234500.123456789, "boom", 1, "", ""),
        ("c", "attempting", 1, 0, 1, 1796234418.9625904, -0.5, None, None, 0, '["x", "y"]', ""),
        (
            "d",
            "pending",
            3,
            2,
            5,
            1796234419.0,
            1e-300,
            2.5,
            'it said "no"\nthen 🦆',
            0,
            '["p1", "p2"]',
            '[["C1", "m1", null]]',
        ),
        ("e", "pending", 0, 0, 0, 1796234419.0, 1 / 3, None, None, 0, "", ""),
    ]
    conn.execute("BEGIN")
    for (
        oid,
        state,
        attempts,
        resends,
        fence,
        created,
        updated,
        due,
        error,
        penalty,
        chunks,
        done,
    ) in rows:
        conn.execute(
            "INSERT INTO ledger (id, profile, platform, channel, thread, reply_to, text, chunks, "
            "state, attempts, resends, fence, owner, created_at, updated_at, next_attempt_at, "
            "last_error, penalty, delivered) VALUES (?, 'X', 'console', 'C1', ?, NULL, ?, ?, ?, "
            "?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                oid,
                "T1" if oid in "bd" else None,
                f"text of {oid} ✓",
                chunks,
                state,
                attempts,
                resends,
                fence,
                GONE,
                created,
                updated,
                due,
                error,
                penalty,
                done,
            ),
        )
    conn.execute("COMMIT")
    conn.close()


def read_plainly(path: Path) -> list[Obligation]:
    conn = sqlite3.connect(path)
    try:
        found = conn.execute(f"SELECT {COLUMNS} FROM ledger ORDER BY created_at, id")
        return [to_obligation(row) for row in found]
    finally:
        conn.close()


async def opened(path: Path) -> SQLiteLedgerStore:
    store = SQLiteLedgerStore(path)
    await store.open()
    await store.aclose()  # the schema, made
    seed(path)
    store = SQLiteLedgerStore(path)
    await store.open()
    return store


async def test_a_page_reads_back_every_value_as_a_plain_select_does(tmp_path: Path) -> None:
    store = await opened(tmp_path / "ledger.db")
    try:
        page = await store.candidates(SCOPE, now=NOW)
        assert page == read_plainly(store.path)
        assert [row.id for row in page] == ["a", "b", "c", "d", "e"]
        assert page[1].next_attempt_at == 1796234500.123456789
        assert page[3].last_error == 'it said "no"\nthen 🦆' and page[3].text == "text of d ✓"
        assert page[3].delivered == (MessageRef("C1", "m1", None),)
        # the next page starts after the last row's exact (created_at, id)
        rest = await store.candidates(
            Scope(
                owners="dead",
                states=CLAIMABLE_STATES,
                due="due_or_unset",
                profiles={"X"},
                after=(page[2].created_at, page[2].id),
            ),
            now=NOW,
        )
        assert [row.id for row in rest] == ["d", "e"]
    finally:
        await store.aclose()


def test_page_order_is_created_at_then_id() -> None:
    def row(oid: str, created: float) -> Obligation:
        return Obligation(
            oid, "X", "p", "c", None, None, "t", ("t",), State.PENDING, 0, 0, 0, None, created,
            created, None, None,
        )  # fmt: skip

    assert in_page_order([row("a", 1.0), row("b", 1.0), row("a", 2.0)])
    assert in_page_order([])
    assert not in_page_order([row("b", 1.0), row("a", 1.0)])
    assert not in_page_order([row("a", 2.0), row("a", 1.0)])


async def test_rows_claimed_as_read_are_stored_as_claimed_row_builds_them(
    tmp_path: Path,
) -> None:
    store = await opened(tmp_path / "ledger.db")
    try:
        page = await store.candidates(SCOPE, now=NOW)
        by_id = {row.id: row for row in page}
        stale = by_id["e"]
        assert await store.claim("e", fence=stale.fence, now=1796234420.5) is not None
        claimed = await store.claim_read(page, now=1796234421.0)
        stored = {row.id: row for row in read_plainly(store.path)}
        for row, result in zip(page, claimed, strict=True):
            if row.id == "e":  # claimed meanwhile: its fence moved, so this claim misses
                assert result is None
            elif row.state is State.ATTEMPTING:  # read attempting: the claim's row comes back
                assert isinstance(result, Obligation) and result == stored[row.id]
            else:
                assert result is True
                assert stored[row.id] == claimed_row(row, row.fence, store.owner, 1796234421.0)
        # the same rows again: every fence moved on, none is claimed twice
        assert await store.claim_read(page, now=1796234422.0) == [None] * len(page)
    finally:
        await store.aclose()


async def test_a_row_recorded_again_at_the_fence_read_is_not_claimed_as_read(
    tmp_path: Path,
) -> None:
    """An older life of the id (purged and recorded again, back at fence 0) is not the row
    read: the claim binds the ``created_at`` read."""
    store = SQLiteLedgerStore(tmp_path / "ledger.db")
    await store.open()
    try:
        reply = Reply(obligation_id="r", profile="X", platform="p", channel="c", text="t")
        first, _ = await store.record(reply, now=1.0)
        await store.abandon("r", fence=0, now=1.5, reason="test")
        assert await store.purge(states={State.ABANDONED}) == 1
        again, created = await store.record(reply, now=2.0)
        assert created and again.fence == first.fence == 0
        assert await store.claim_read([first], now=3.0) == [None]
        assert await store.claim_read([again], now=3.0) == [True]
    finally:
        await store.aclose()


def test_a_read_on_another_connection_is_refused_not_empty(tmp_path: Path) -> None:
    # take_row's rows reach only the object made for its connection: a read through another
    # connection would come back empty, which a sweep would take for "nothing to send".
    path = tmp_path / "rows.db"
    own, other = sqlite3.connect(path, isolation_level=None), sqlite3.connect(path)
    try:
        own.execute("CREATE TABLE ledger (id TEXT)")
        own.execute("INSERT INTO ledger VALUES ('a')")
        taken = TakenRows(own)
        TakenRows(other)
        assert taken.read(own, "id", "FROM ledger WHERE id = ?", ("a",)) == [("a",)]
        with pytest.raises(ValueError, match="not this object's"):
            taken.read(other, "id", "FROM ledger WHERE id = ?", ("a",))
    finally:
        own.close()
        other.close()
