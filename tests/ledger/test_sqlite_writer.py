"""The SQLite writer: group commits, failing calls, both event loops, durability settings."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import anyio
import pytest

from bridge_core.ledger import LedgerError, Reply, open_store
from bridge_core.ledger.sqlite import SQLiteLedgerStore
from bridge_core.ledger.sqlwriter import SQLiteWriter

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)  # real time: the writer is a real thread


def _setup(conn: sqlite3.Connection) -> None:
    conn.execute("CREATE TABLE IF NOT EXISTS t (k INTEGER PRIMARY KEY, v TEXT NOT NULL)")


async def test_concurrent_calls_share_commits_and_a_failing_call_undoes_nothing_else(
    tmp_path: Path,
) -> None:
    writer = SQLiteWriter(str(tmp_path / "w.db"), setup=_setup)
    await writer.start()
    results: dict[int, object] = {}

    async def put(k: int) -> None:
        def run(conn: sqlite3.Connection) -> int:
            if k == 13:
                conn.execute("INSERT INTO t VALUES (?, ?)", (k, "half-done"))
                raise ValueError("call 13 fails after writing")
            conn.execute("INSERT INTO t VALUES (?, ?)", (k, f"v{k}"))
            return k

        try:
            results[k] = await writer.call(run)
        except ValueError as error:
            results[k] = error

    async with anyio.create_task_group() as group:
        for k in range(200):
            group.start_soon(put, k)
    assert isinstance(results.pop(13), ValueError)
    assert results == {k: k for k in range(200) if k != 13}
    rows = await writer.call(lambda conn: conn.execute("SELECT k, v FROM t").fetchall())
    assert len(rows) == 199 and (13, "half-done") not in rows
    assert writer.batches < writer.calls  # concurrent calls were grouped into commits
    await writer.stop()
    with pytest.raises(RuntimeError, match="not running"):
        await writer.call(lambda conn: None)


async def test_the_ledger_file_is_wal_with_full_sync_and_survives_reopening(
    tmp_path: Path,
) -> None:
    path = tmp_path / "sub" / "ledger.db"
    store = await open_store(path)
    assert isinstance(store, SQLiteLedgerStore)
    modes = await store.writer.call(
        lambda conn: (
            conn.execute("PRAGMA journal_mode").fetchone()[0],
            conn.execute("PRAGMA synchronous").fetchone()[0],
        )
    )
    assert modes == ("wal", 2)  # 2 = FULL
    reply = Reply(obligation_id="key-1", profile="X", platform="p", channel="c", text="t")
    row, created = await store.record(reply, now=1.0)
    await store.aclose()
    again = await open_store(path)
    assert (await again.record(reply, now=2.0)) == (row, False)
    assert not created or row.created_at == 1.0
    await again.aclose()


async def test_an_unusable_path_is_a_ledger_error_that_says_what_to_check(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(LedgerError, match="cannot open the ledger file"):
        await open_store(blocker / "ledger.db")
