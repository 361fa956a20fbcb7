"""The SQLite ledger's writer process (``writer="process"``, ADR 0186): the hot statements run
in a child with a GIL of its own, every reply still recorded before it is sent; a child that
dies fails every call loudly; a child ends with its gateway; a call on the thread after hot
calls sees them; off asyncio there is no child."""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from functools import partial
from pathlib import Path
from typing import Any, Literal

import anyio
import anyio.lowlevel
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge_core.ledger import Delivery, DeliveryLedger, LedgerError, Reply, State, sqlprocess
from bridge_core.ledger.sqlite import SQLiteLedgerStore
from bridge_core.provider import MessageRef
from bridge_core.testing.processes import running, wait_ended

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the writer process is asyncio's; off it, see the trio test below


def reply(number: int) -> Reply:
    return Reply(
        obligation_id=f"o{number}", profile="p", platform="console", channel="c", text="hi"
    )


def states(path: Path) -> dict[str, int]:
    with closing(sqlite3.connect(path)) as conn:
        return dict(conn.execute("SELECT state, count(*) FROM ledger GROUP BY state").fetchall())


@pytest.fixture
async def store(tmp_path: Path) -> Any:
    opened = SQLiteLedgerStore(tmp_path / "l.sqlite3", writer="process")
    await opened.open()
    yield opened
    await opened.aclose()


@pytest.mark.parametrize("begins", [False, True], ids=["submit", "claimed at the turn"])
async def test_replies_are_recorded_before_their_send_and_settled_by_the_child(
    store: SQLiteLedgerStore, begins: bool
) -> None:
    assert store.hot is not store.writer and store.hot.pid is not None
    assert running(store.hot.pid)
    recorded_first: list[bool] = []

    async def deliver(delivery: Delivery) -> MessageRef:
        await delivery.begin()
        with closing(sqlite3.connect(store.path)) as conn:  # committed, by the child
            found = conn.execute(
                "SELECT state FROM ledger WHERE id = ?", (delivery.obligation_id,)
            ).fetchone()
        recorded_first.append(found == ("attempting",))
        return MessageRef(delivery.channel, delivery.obligation_id)

    ledger = DeliveryLedger(store, deliver=deliver, profiles={"p"}, deliver_begins=begins)
    async with anyio.create_task_group() as group:
        for number in range(300):
            group.start_soon(ledger.submit, reply(number))
    assert recorded_first == [True] * 300
    assert states(store.path) == {"delivered": 300}
    statements = 3 if begins else 2  # record (claimed, or then claimed), settle
    assert store.hot.calls == 300 * statements
    assert 1 <= store.hot.batches < 300 * statements  # group commits, not one a call


async def test_a_boot_sweep_claims_and_settles_through_the_child(tmp_path: Path) -> None:
    path = tmp_path / "l.sqlite3"
    # rows a process of another host left pending (a SQLite ledger's owner there counts as
    # dead), so the sweep's claims call the child's owner_alive
    seeded = SQLiteLedgerStore(path, owner="gone-host|1|0")
    await seeded.open()
    for number in range(1500):
        await seeded.record(reply(number), now=time.time())
    await seeded.aclose()
    store = SQLiteLedgerStore(path, writer="process")
    await store.open()
    try:
        sent: list[str] = []

        async def deliver(delivery: Delivery) -> MessageRef:
            sent.append(delivery.obligation_id)
            return MessageRef(delivery.channel, "1")

        report = await DeliveryLedger(store, deliver=deliver, profiles={"p"}).boot_sweep()
        assert report.delivered == 1500 and sorted(set(sent)) == sorted(sent)
        assert states(path) == {"delivered": 1500}
        # the claims and the settles went to the child, a page's worth a call
        assert store.hot.calls >= 2 and store.hot.batches >= 2
    finally:
        await store.aclose()


async def test_settles_alone_commit_unsynced_and_survive_a_reopen(tmp_path: Path) -> None:
    # ADR 0143, in the child: a batch of nothing but delivered settles commits at NORMAL.
    path = tmp_path / "l.sqlite3"
    store = SQLiteLedgerStore(path, writer="process")
    await store.open()
    row, _ = await store.record(reply(0), now=1.0, claimed=True)
    assert store.hot.unsynced == 0
    ref = MessageRef("c", "m1")
    settled = await store.settle(row.id, fence=row.fence, state=State.DELIVERED, now=2.0, ref=ref)
    assert settled is not None and settled.state is State.DELIVERED
    assert store.hot.unsynced == 1
    await store.aclose()
    assert states(path) == {"delivered": 1}


async def test_a_record_whose_caller_stopped_waiting_still_commits_and_the_next_goes_on(
    store: SQLiteLedgerStore,
) -> None:
    # A cancelled caller leaves its call to commit (it was handed over) and nothing wedged.
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as group:
            group.start_soon(partial(store.record, reply(0), now=1.0))
            await anyio.lowlevel.checkpoint()  # queued, not answered
            scope.cancel()
    assert scope.cancelled_caught
    row = await store.get("o0")  # after the hot calls made before it (caught_up)
    assert row is not None and row.state is State.PENDING
    _, created = await store.record(reply(1), now=1.0)
    assert created and states(store.path) == {"pending": 2}


async def test_an_item_that_cannot_cross_the_pipe_fails_alone(store: SQLiteLedgerStore) -> None:
    class Unpicklable:
        def __reduce__(self) -> Any:
            raise TypeError("this item stays in this process")

    outcomes: dict[str, Any] = {}

    async def bad() -> None:
        try:
            await store.hot.call_merged(store._records, Unpicklable())  # type: ignore[arg-type]
        except LedgerError as error:
            outcomes["bad"] = error

    async def good() -> None:
        outcomes["good"] = await store.record(reply(0), now=1.0)

    with anyio.fail_after(10):  # unguarded, both callers would wait for ever
        async with anyio.create_task_group() as group:  # both in one frame
            group.start_soon(bad)
            group.start_soon(good)
    assert "could not be sent to its writer" in str(outcomes["bad"])
    assert outcomes["good"][1] is True and states(store.path) == {"pending": 1}


async def test_a_call_on_the_thread_sees_the_hot_calls_made_before_it(
    store: SQLiteLedgerStore,
) -> None:
    # A record queued and not awaited (its caller may have gone): a read on the thread's
    # connection made after it must find it, as with the thread writer alone.
    for number in range(50):
        recording = store.record_soon(reply(number), now=1.0, claimed=True)
        assert recording is not None
        row = await store.get(f"o{number}")
        assert row is not None and row.state is State.ATTEMPTING


async def test_the_child_outlasts_a_ctrl_c_or_a_stop_signal_to_the_whole_group(
    store: SQLiteLedgerStore,
) -> None:
    # A terminal's Ctrl-C and a service manager's stop reach every process of the group: the
    # gateway then stops gracefully, and its writer must still take its last replies.
    assert store.hot.pid is not None
    await store.record(reply(0), now=1.0)
    for number, sent in enumerate((signal.SIGINT, signal.SIGTERM), start=1):
        os.kill(store.hot.pid, sent)
        _, created = await store.record(reply(number), now=1.0)
        assert created and running(store.hot.pid)
    assert states(store.path) == {"pending": 3}


async def test_a_killed_child_fails_every_call_loudly_and_the_store_still_closes(
    tmp_path: Path,
) -> None:
    store = SQLiteLedgerStore(tmp_path / "l.sqlite3", writer="process")
    await store.open()
    await store.record(reply(0), now=1.0)
    assert store.hot.pid is not None
    os.kill(store.hot.pid, signal.SIGKILL)
    with anyio.fail_after(10):
        with pytest.raises(LedgerError, match=r"writer process .* is gone.*restart the gateway"):
            for number in range(1, 1000):  # until the child's end is read
                await store.record(reply(number), now=1.0)
                await anyio.sleep(0.01)
        with pytest.raises(LedgerError, match="writer process"):
            await store.record(reply(2000), now=1.0)  # and every later call
        await store.aclose()
    assert states(tmp_path / "l.sqlite3").get("pending", 0) >= 1  # what it confirmed is kept


GATEWAY = """
import sys, anyio
from bridge_core.ledger.sqlite import SQLiteLedgerStore

async def main(path):
    store = SQLiteLedgerStore(path, writer="process")
    await store.open()
    print(store.hot.pid, flush=True)
    await anyio.sleep(600)

anyio.run(main, sys.argv[1])
"""


def test_the_child_ends_when_its_gateway_is_killed(tmp_path: Path) -> None:
    gateway = subprocess.Popen(
        [sys.executable, "-c", GATEWAY, str(tmp_path / "l.sqlite3")], stdout=subprocess.PIPE
    )
    assert gateway.stdout is not None
    child = int(gateway.stdout.readline())
    assert running(child)
    gateway.kill()
    gateway.wait()
    gateway.stdout.close()
    wait_ended([child])  # killed with it (PR_SET_PDEATHSIG)


def test_off_asyncio_there_is_no_child_and_the_thread_writes(tmp_path: Path) -> None:
    async def run() -> None:
        store = SQLiteLedgerStore(tmp_path / "t.sqlite3", writer="process")
        await store.open()
        try:
            row, created = await store.record(reply(0), now=1.0)
            assert created and row.state is State.PENDING
            assert store.hot.pid is None and store.writer.calls >= 1
        finally:
            await store.aclose()

    anyio.run(run, backend="trio")


async def test_a_call_from_another_threads_event_loop_goes_to_the_thread_writer(
    store: SQLiteLedgerStore,
) -> None:
    """The child answers its own loop's calls only: a call made on a loop of another thread
    (while the child's loop runs) is the thread writer's, and both rows are stored."""
    await store.record(reply(0), now=1.0)
    hot_calls, thread_calls = store.hot.calls, store.writer.calls

    def elsewhere() -> tuple[object, bool]:
        return asyncio.run(store.record(reply(1), now=1.0))

    _, created = await anyio.to_thread.run_sync(elsewhere)
    assert created
    assert store.writer.calls == thread_calls + 1 and store.hot.calls == hot_calls
    assert (await store.get("o1")) is not None and (await store.get("o0")) is not None


@pytest.mark.parametrize("writer", ["auto", "process"])
@pytest.mark.parametrize("cause", ["child ends before READY", "no interpreter"])
async def test_a_child_that_cannot_start_leaves_auto_on_the_thread_and_fails_process(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    writer: Literal["auto", "process"],
    cause: str,
) -> None:
    # a Python that cannot run the child (a frozen build, a sandbox): it ends before READY, or
    # sys.executable is no interpreter at all (Popen itself fails)
    if cause == "no interpreter":
        monkeypatch.setattr(sqlprocess.sys, "executable", str(tmp_path / "no-such-python"))
    else:
        monkeypatch.setattr(sqlprocess, "_RUN_CHILD", "import sys; sys.exit(3)")
    store = SQLiteLedgerStore(tmp_path / "l.sqlite3", writer=writer)
    if writer == "process":
        with pytest.raises(LedgerError, match=r"writer process .* did not start"):
            await store.open()
        return
    with caplog.at_level(logging.WARNING, logger="bridge_core.ledger.sqlprocess"):
        await store.open()
    try:
        assert isinstance(store.hot, sqlprocess.SQLiteWriterProcess) and store.hot.pid is None
        assert "did not start" in caplog.text and "writer thread takes every write" in caplog.text
        row, created = await store.record(reply(0), now=1.0)
        assert created and row.state is State.PENDING and store.writer.calls >= 1
    finally:
        await store.aclose()
    assert states(tmp_path / "l.sqlite3") == {"pending": 1}


async def test_auto_runs_the_hot_statements_in_a_child_where_one_starts(tmp_path: Path) -> None:
    store = SQLiteLedgerStore(tmp_path / "l.sqlite3", writer="auto")
    await store.open()
    try:
        assert isinstance(store.hot, sqlprocess.SQLiteWriterProcess) and store.hot.pid is not None
        await store.record(reply(0), now=1.0)
        assert store.hot.calls == 1
    finally:
        await store.aclose()


ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=60)  # lone surrogates too
NUMBERS = itertools.count()


@pytest.fixture
async def both(tmp_path: Path) -> Any:
    thread = SQLiteLedgerStore(tmp_path / "t.sqlite3")
    process = SQLiteLedgerStore(tmp_path / "p.sqlite3", writer="process")
    await thread.open()
    await process.open()
    yield thread, process
    await process.aclose()
    await thread.aclose()


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    text=ANY_TEXT,
    channel=st.text(st.characters(exclude_categories=()), min_size=1, max_size=40),
    thread=st.none() | st.text(st.characters(exclude_categories=()), min_size=1, max_size=40),
)
async def test_any_text_crosses_the_pipe_as_the_thread_stores_it(
    both: tuple[SQLiteLedgerStore, SQLiteLedgerStore], text: str, channel: str, thread: str | None
) -> None:
    """The pipe is a boundary: full Unicode (lone surrogates, NUL, control characters) is
    recorded and read back through the writer process exactly as through the thread, or
    refused the same way, and the child goes on."""
    given_reply = Reply(
        obligation_id=f"u{next(NUMBERS)}",
        profile="p",
        platform="console",
        channel=channel,
        thread=thread,
        text=text,
    )
    outcomes: list[Any] = []
    for store in both:
        try:
            row, created = await store.record(given_reply, now=1.0)
        except Exception as error:
            outcomes.append(type(error))
            continue
        read = await store.get(row.id)
        assert created and read is not None
        outcomes.append((read.text, read.channel, read.thread))
    assert outcomes[0] == outcomes[1]
    assert both[1].hot.pid is not None and running(both[1].hot.pid)
