"""The SQLite ledger's index of open rows: its condition, the queries that use it, old files."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from bridge_core.ledger import Reply, open_store
from bridge_core.ledger.sqlite import SQLiteLedgerStore
from bridge_core.ledger.store import CLAIMABLE_STATES, Scope

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


OLD_INDEX = (
    "CREATE INDEX ledger_open ON ledger (created_at, id) "
    "WHERE state IN ('pending', 'attempting', 'failed')"
)


def _indexes(path: Path) -> dict[str, str]:
    conn = sqlite3.connect(path)
    try:
        found = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'index'")
        return {name: sql for name, sql in found if sql is not None}
    finally:
        conn.close()


async def test_a_file_with_the_old_index_of_open_rows_gets_the_new_one_and_keeps_its_rows(
    tmp_path: Path,
) -> None:
    path = tmp_path / "ledger.db"
    store = await open_store(path)
    row, _ = await store.record(
        Reply.answering(profile="X", platform="console", channel="C1", answers="m1", text="hi"),
        now=store.now(),
    )
    await store.aclose()
    conn = sqlite3.connect(path)  # the file as the code before ADR 0134 left it
    conn.execute("DROP INDEX ledger_open_rows")
    conn.execute(OLD_INDEX)
    conn.close()
    assert "ledger_open" in _indexes(path)

    store = await open_store(path)
    found = await store.candidates(
        Scope(owners="any", states=CLAIMABLE_STATES, due="due_or_unset", profiles={"X"}),
        now=store.now(),
    )
    await store.aclose()

    indexes = _indexes(path)
    assert "ledger_open" not in indexes
    assert " IN " not in indexes["ledger_open_rows"].upper()
    assert [candidate.id for candidate in found] == [row.id]


async def test_a_sweeps_read_walks_the_index_of_open_rows_in_order(tmp_path: Path) -> None:
    store = await open_store(tmp_path / "ledger.db")
    assert isinstance(store, SQLiteLedgerStore)
    statements: list[str] = []

    def trace(conn: sqlite3.Connection) -> None:
        conn.set_trace_callback(statements.append)

    # the page reads go through the reader's connection (ADR 0136), the rest through the writer
    await store.writer.call(trace)
    await store._reader.call(trace)
    for after in (None, (0.0, "")):
        await store.candidates(
            Scope(
                owners="dead",
                states=CLAIMABLE_STATES,
                due="due_or_unset",
                profiles={"X"},
                after=after,
            ),
            now=store.now(),
        )

    def plans(conn: sqlite3.Connection) -> list[str]:
        conn.set_trace_callback(None)
        reads = [sql for sql in statements if sql.startswith("SELECT")]
        assert len(reads) == 2
        return [
            " / ".join(step[3] for step in conn.execute(f"EXPLAIN QUERY PLAN {sql}"))
            for sql in reads
        ]

    await store._reader.call(lambda conn: conn.set_trace_callback(None))
    for plan in await store.writer.call(plans):
        # no sort of every open row for every page
        assert "USING INDEX ledger_open_rows" in plan
        assert "TEMP B-TREE" not in plan
    await store.aclose()
