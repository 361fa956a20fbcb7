"""The SQLite writer: group commits, failing calls, both event loops, durability settings."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path

import anyio
import pytest

from bridge_core.ledger import LedgerError, Reply, State, open_store
from bridge_core.ledger.sqlite import SQLiteLedgerStore
from bridge_core.ledger.sqlwriter import SQLiteWriter
from bridge_core.provider import MessageRef

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


async def test_a_batch_of_settles_only_commits_without_an_fsync_and_any_other_with_one(
    tmp_path: Path,
) -> None:
    # ADR 0143: a record or a claim is fsynced before its caller goes on; a settle need only
    # survive a process kill, so a batch holding nothing else commits at synchronous=NORMAL.
    store = await open_store(tmp_path / "ledger.db")
    assert isinstance(store, SQLiteLedgerStore)
    levels: list[int] = []
    real = store.writer._set_synchronous

    def spy(conn: sqlite3.Connection, level: str) -> None:
        real(conn, level)
        levels.append(conn.execute("PRAGMA synchronous").fetchone()[0])

    store.writer._set_synchronous = spy  # type: ignore[method-assign]
    replies = [
        Reply(obligation_id=f"k{n}", profile="X", platform="p", channel="c", text="t")
        for n in range(3)
    ]
    rows = [(await store.record(reply, now=1.0, claimed=True))[0] for reply in replies]
    ref = MessageRef("c", "m1")
    settled = await store.settle(
        rows[0].id, fence=rows[0].fence, state=State.DELIVERED, now=2.0, ref=ref
    )
    assert settled is not None and settled.state is State.DELIVERED
    held = await store.prove_claim(rows[1].id, fence=rows[1].fence, now=2.0)
    assert held is not None
    assert await store.mark_delivered([(rows[1].id, rows[1].fence, ref)], now=3.0) == [True]
    failed = await store.settle(
        rows[2].id, fence=rows[2].fence, state=State.FAILED, now=2.0, last_error="x"
    )
    assert failed is not None and failed.state is State.FAILED
    await store.get(rows[0].id)  # any other call: FULL again
    assert levels == [2, 2, 2, 1, 1, 1, 2, 2]  # 2 = FULL, 1 = NORMAL
    assert store.writer.unsynced == 3
    await store.aclose()
    again = await open_store(tmp_path / "ledger.db")  # what was committed unsynced is there
    found = await again.get(rows[1].id)
    assert found is not None and found.state is State.DELIVERED
    await again.aclose()


async def test_an_idle_writer_rests_at_full_after_a_batch_of_settles(tmp_path: Path) -> None:
    # ADR 0164: the next record (a message waits for it) finds the level set already.
    store = await open_store(tmp_path / "ledger.db")
    assert isinstance(store, SQLiteLedgerStore)
    reply = Reply(obligation_id="k", profile="X", platform="p", channel="c", text="t")
    row, _ = await store.record(reply, now=1.0, claimed=True)
    ref = MessageRef("c", "m1")
    assert await store.settle(row.id, fence=row.fence, state=State.DELIVERED, now=2.0, ref=ref)
    assert store.writer.unsynced == 1  # the settle committed at NORMAL
    with anyio.fail_after(5):  # set in the writer's thread once it has nothing queued
        while store.writer._synchronous != "FULL":  # noqa: ASYNC110
            await anyio.sleep(0.001)
    await store.aclose()


async def test_an_unusable_path_is_a_ledger_error_that_says_what_to_check(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(LedgerError, match="cannot open the ledger file"):
        await open_store(blocker / "ledger.db")


async def test_rows_the_store_returns_are_the_rows_it_stored(tmp_path: Path) -> None:
    """Claims and held updates of rows the store already knows bring back only ids (and the
    columns an update appends to); the rows it builds from them must equal the stored rows."""
    store = await open_store(tmp_path / "ledger.db")
    assert isinstance(store, SQLiteLedgerStore)
    reply = Reply(
        obligation_id="chunked", profile="X", platform="p", channel="c", text="ab",
        chunks=("a", "b"),
    )  # fmt: skip
    row, created = await store.record(reply, now=1.0)
    assert created and row == await store.get("chunked")
    claimed = await store.claim("chunked", fence=0, now=2.0)
    assert claimed is not None and claimed == await store.get("chunked")
    part = await store.progress("chunked", fence=1, ref=MessageRef("c", "m1", "t"), now=3.0)
    assert part is not None and part == await store.get("chunked")
    failed = await store.settle(
        "chunked", fence=1, state=State.FAILED, now=4.0, next_attempt_at=9.0,
        last_error="Unreachable: down",
    )  # fmt: skip
    assert failed is not None and failed == await store.get("chunked")
    assert failed.delivered == (MessageRef("c", "m1", "t"),) and failed.next_attempt_at == 9.0
    again = await store.claim("chunked", fence=1, now=5.0)
    assert again is not None and again == await store.get("chunked")
    assert (again.attempts, again.resends, again.fence) == (2, 1, 2)
    assert await store.claim("chunked", fence=1, now=5.5) is None  # the fence moved on
    done = await store.settle(
        "chunked", fence=2, state=State.DELIVERED, now=6.0, ref=MessageRef("c", "m2", None)
    )
    assert done is not None and done == await store.get("chunked")
    assert done.delivered == (MessageRef("c", "m1", "t"), MessageRef("c", "m2", None))
    assert await store.settle("chunked", fence=2, state=State.FAILED, now=7.0) is None
    await store.aclose()


async def test_a_claim_race_inside_one_group_commit_has_one_winner(tmp_path: Path) -> None:
    store = await open_store(tmp_path / "ledger.db")
    assert isinstance(store, SQLiteLedgerStore)
    reply = Reply(obligation_id="raced", profile="X", platform="p", channel="c", text="t")
    await store.record(reply, now=1.0)
    results: list[object] = []

    async def claim() -> None:
        results.append(await store.claim("raced", fence=0, now=2.0))

    async with anyio.create_task_group() as group:
        for _ in range(20):
            group.start_soon(claim)
    winners = [result for result in results if result is not None]
    assert len(winners) == 1 and winners[0] == await store.get("raced")
    await store.aclose()


class _Gate:
    """A merged kind whose statements wait (on the writer's thread) until ``opened`` is set."""

    def __init__(self) -> None:
        self.opened = threading.Event()
        self.runs = 0

    def run_many(self, conn: sqlite3.Connection, items: Sequence[int]) -> list[int]:
        self.runs += 1
        if not self.opened.wait(10):
            raise TimeoutError("the batch ran before its caller's loop was told it had begun")
        conn.execute("INSERT INTO t VALUES (?, 'gated')", (items[0],))
        return [item * 2 for item in items]


async def test_begun_and_committing_reach_the_callers_loop_once_while_the_batch_runs(
    tmp_path: Path, anyio_backend: str
) -> None:
    """The sweep sends its last batch once the writer has begun the next claim, and chooses
    its next batch once that claim's COMMIT begins (ADR 0180): ``begun`` must come while the
    batch runs, each hint once, though the batch runs again without a call that failed in
    it, and both before the results."""
    writer = SQLiteWriter(str(tmp_path / "w.db"), setup=_setup)
    await writer.start()
    gate = _Gate()
    told: list[str] = []
    results: list[object] = []

    def begun() -> None:
        told.append("begun")
        gate.opened.set()

    async def gated() -> None:
        results.append(
            await writer.call_merged_many(
                gate, [1, 2, 3], begun=begun, committing=lambda: told.append("committing")
            )
        )

    async def failing() -> None:
        def run(conn: sqlite3.Connection) -> None:
            raise ValueError("fails: its batch runs again without it")

        with pytest.raises(ValueError, match="runs again"):
            await writer.call(run)

    release = threading.Event()

    async def hold() -> None:  # keeps the writer busy until both calls are queued
        await writer.call(lambda conn: release.wait(10))

    async with anyio.create_task_group() as group:
        group.start_soon(hold)
        await anyio.wait_all_tasks_blocked()
        group.start_soon(gated)
        await anyio.wait_all_tasks_blocked()  # queued first: it runs before the failing call
        group.start_soon(failing)
        await anyio.wait_all_tasks_blocked()
        release.set()
    assert results == [[2, 4, 6]]
    assert told == (["begun", "committing"] if anyio_backend == "asyncio" else ["begun"])
    assert gate.runs == 2  # the batch ran again without the failing call
    assert await writer.call(lambda conn: conn.execute("SELECT k FROM t").fetchall()) == [(1,)]

    nothing: list[str] = []
    assert await writer.call_merged_many(gate, [], begun=lambda: nothing.append("begun")) == []
    assert nothing == ["begun"]  # nothing to queue: told at once
    await writer.stop()
