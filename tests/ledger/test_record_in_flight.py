"""A record queued without waiting, and the send that waits for its commit (ADR 0164).

``DeliveryLedger.record_soon`` queues a reply's record (claimed) to the SQLite writer;
``send_recorded`` hands it to the delivery function at once, and the delivery's ``begin()``
returns only after the record's commit returned and created the row: nothing reaches the
platform before its row is durable, and a row recorded before is not sent again."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from bridge_core.ledger import Delivery, DeliveryLedger, Reply, State
from bridge_core.ledger.sqlite import SQLiteLedgerStore
from bridge_core.ledger.sqlmerged import MergedRecords
from bridge_core.provider import Forbidden, MessageRef

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # a record in flight is asyncio's (the writer's calls carry its futures)


def reply(number: int = 0) -> Reply:
    return Reply(
        obligation_id=f"o{number}", profile="p", platform="console", channel="c", text="hi"
    )


def stored(path: Path, obligation_id: str) -> tuple[str, int, int] | None:
    """The row's state, fence and attempts as committed to the file (a connection of its own)."""
    with sqlite3.connect(path) as conn:
        found = conn.execute(
            "SELECT state, fence, attempts FROM ledger WHERE id = ?", (obligation_id,)
        ).fetchone()
    return None if found is None else (str(found[0]), int(found[1]), int(found[2]))


@pytest.fixture(params=["thread", "process"])
async def store(tmp_path: Path, request: pytest.FixtureRequest) -> Any:
    # the writer process (ADR 0186) says when a commit begins and ends as the thread does
    opened = SQLiteLedgerStore(tmp_path / "l.sqlite3", writer=request.param)
    await opened.open()
    yield opened
    await opened.aclose()


@pytest.fixture
async def thread_store(tmp_path: Path) -> Any:
    opened = SQLiteLedgerStore(tmp_path / "l.sqlite3")
    await opened.open()
    yield opened
    await opened.aclose()


async def test_a_record_in_flight_says_its_commit_began_then_its_outcome(
    store: SQLiteLedgerStore,
) -> None:
    recording = store.record_soon(reply(), now=1.0, claimed=True)
    assert recording is not None and not recording.done
    assert (recording.fresh.state, recording.fresh.fence) == (State.ATTEMPTING, 1)
    seen: list[str] = []

    async def hint() -> None:
        await recording.committing()
        seen.append("committing")

    async def outcome() -> None:
        await recording.committed()
        seen.append("committed")

    async with anyio.create_task_group() as group:
        group.start_soon(outcome)
        group.start_soon(hint)
    assert seen == ["committing", "committed"]
    row, created = await recording.committed()  # again, once done: the same outcome
    assert created and row == recording.fresh
    assert stored(store.path, "o0") == ("attempting", 1, 1)
    again = store.record_soon(reply(), now=2.0, claimed=True)
    assert again is not None
    row, created = await again.committed()
    assert not created and row.created_at == 1.0  # the row as first recorded


async def test_the_first_waiter_is_woken_first_and_a_cancelled_one_leaves_the_rest(
    store: SQLiteLedgerStore,
) -> None:
    recording = store.record_soon(reply(), now=1.0, claimed=True)
    assert recording is not None
    woken: list[str] = []
    scope = anyio.CancelScope()

    async def wait(name: str, first: bool = False) -> None:
        await recording.committed(first=first)
        woken.append(name)

    async def cancelled() -> None:
        with scope:
            await wait("cancelled")

    async with anyio.create_task_group() as group:
        group.start_soon(wait, "handler")
        group.start_soon(cancelled)
        await anyio.lowlevel.checkpoint()  # both wait now, before the sender's begin()
        group.start_soon(wait, "sender", True)
        await anyio.lowlevel.checkpoint()
        scope.cancel()
    assert woken == ["sender", "handler"]
    assert scope.cancelled_caught


async def test_a_record_that_fails_raises_to_every_waiter(
    thread_store: SQLiteLedgerStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the thread's writer: the patched statement runs in this process (the writer process's
    # errors: test_sqlite_writer_process.py)
    store = thread_store

    def refuse(self: MergedRecords, conn: sqlite3.Connection, items: Any) -> Any:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(MergedRecords, "run_many", refuse)
    recording = store.record_soon(reply(), now=1.0, claimed=True)
    assert recording is not None
    await recording.committing()  # a failed record ends the hint too
    for first in (True, False):
        with pytest.raises(sqlite3.OperationalError):
            await recording.committed(first=first)
    assert stored(store.path, "o0") is None


async def test_off_asyncio_nothing_is_queued(tmp_path: Path) -> None:
    async def run() -> None:
        opened = SQLiteLedgerStore(tmp_path / "t.sqlite3")
        await opened.open()
        try:
            assert opened.record_soon(reply(), now=1.0, claimed=True) is None
            assert await opened.rows() == []
        finally:
            await opened.aclose()

    await anyio.to_thread.run_sync(lambda: anyio.run(run, backend="trio"))


class Platform:
    """A delivery function that awaits ``begin()`` before its call, as the sender does, and
    reads the row from the file at the moment of the call."""

    def __init__(self, path: Path, *, refuse_before_begin: bool = False) -> None:
        self.path = path
        self.refuse_before_begin = refuse_before_begin
        self.calls: list[tuple[str, tuple[str, int, int] | None]] = []

    async def deliver(self, delivery: Delivery) -> MessageRef:
        if self.refuse_before_begin:
            raise Forbidden("no access")
        await delivery.begin()
        self.calls.append((delivery.text, stored(self.path, delivery.obligation_id)))
        return MessageRef("c", f"m{len(self.calls)}")


def ledger_for(store: SQLiteLedgerStore, platform: Platform, **options: Any) -> DeliveryLedger:
    options.setdefault("deliver_begins", True)
    return DeliveryLedger(store, deliver=platform.deliver, profiles={"p"}, **options)


async def test_the_send_goes_out_only_once_its_record_is_in_the_file(
    store: SQLiteLedgerStore,
) -> None:
    platform = Platform(store.path)
    ledger = ledger_for(store, platform)
    recording = ledger.record_soon(reply())
    assert recording is not None
    ended = await ledger.send_recorded(recording)
    assert platform.calls == [("hi", ("attempting", 1, 1))]  # committed before the call
    assert ended is not None and ended.state is State.DELIVERED and ended.attempts == 1
    assert stored(store.path, "o0") == ("delivered", 1, 1)
    assert (await recording.committed())[1]


async def test_a_row_recorded_before_is_not_sent_or_settled_again(
    store: SQLiteLedgerStore,
) -> None:
    for refuse in (False, True):
        platform = Platform(store.path, refuse_before_begin=refuse)
        ledger = ledger_for(store, platform)
        number = int(refuse)
        first = ledger.record_soon(reply(number))
        assert first is not None
        await first.committed()  # recorded, claimed, and not sent: as a crash would leave it
        again = ledger.record_soon(reply(number))
        assert again is not None
        assert await ledger.send_recorded(again) is None
        assert platform.calls == []
        assert stored(store.path, f"o{number}") == ("attempting", 1, 1)  # left as it was


async def test_a_send_refused_before_its_begin_settles_the_row_it_recorded(
    store: SQLiteLedgerStore,
) -> None:
    ledger = ledger_for(store, Platform(store.path, refuse_before_begin=True))
    recording = ledger.record_soon(reply())
    assert recording is not None
    ended = await ledger.send_recorded(recording)
    assert ended is not None and ended.state is State.FAILED  # a failed attempt, as ADR 0121
    assert stored(store.path, "o0") == ("failed", 1, 1)


async def test_only_a_ledger_whose_delivery_begins_queues_a_record(
    store: SQLiteLedgerStore,
) -> None:
    platform = Platform(store.path)
    assert ledger_for(store, platform, deliver_begins=False).record_soon(reply()) is None
    offline = ledger_for(store, platform, connected=lambda platform: False)
    assert offline.record_soon(reply()) is None
    assert await store.rows() == []
    with pytest.raises(ValueError, match="profile"):
        ledger_for(store, platform).record_soon(
            Reply(obligation_id="x", profile="other", platform="console", channel="c", text="t")
        )
