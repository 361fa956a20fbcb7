"""A SQLite ledger's reports (``counts_by_state``: /metrics, /status and ``ledger counts``;
``rows``: ``ledger list``) read on the reader's connection, not in the writer's transaction. A
count scans every row (0.4 s at a million rows on the benchmark machine); on the writer's
thread each scrape held every reply being recorded meanwhile, and the CLI's reports waited for
the gateway's writes. In WAL mode a reader neither waits for the writer nor holds it."""

from __future__ import annotations

import threading
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from bridge_core.ledger import Reply, State
from bridge_core.ledger.sqlite import SQLiteLedgerStore

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def reply(index: int) -> Reply:
    return Reply(
        obligation_id=f"r{index}",
        profile="X",
        platform="console",
        channel="C1",
        text=f"reply {index}",
    )


async def test_reports_answer_while_the_writer_is_held(tmp_path: Path) -> None:
    store = SQLiteLedgerStore(tmp_path / "ledger.db")
    await store.open()
    try:
        for index in range(3):
            await store.record(reply(index), now=1000.0 + index)
        held, release = threading.Event(), threading.Event()

        def hold(conn: object) -> None:  # the writer inside a transaction, as while a batch runs
            held.set()
            release.wait()

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(store.writer.call, hold)
            await anyio.to_thread.run_sync(held.wait)
            try:
                with anyio.fail_after(10):  # a guard only: the reads answer at once or never
                    counts = await store.counts_by_state()
                    rows = await store.rows(limit=10)
            finally:
                release.set()
        assert counts[State.PENDING] == 3
        assert [row.text for row in rows] == ["reply 2", "reply 1", "reply 0"]
    finally:
        await store.aclose()
