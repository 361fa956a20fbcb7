"""The SQLite log's writer thread: merged admissions, seqs in queue order, both event loops."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import anyio
import pytest

from bridge_core.conversation import Frame, Turn
from bridge_core.ownership import LogUnavailable
from bridge_core.ownership.sqlite_log import SqliteConversationLog
from bridge_core.provider import InboundMessage

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)  # the writer wakes each loop its own way


def message(mid: str, author: str = "alice") -> InboundMessage:
    return InboundMessage(message_id=mid, channel="C", author=author, text=f"text {mid}", at=0.0)


async def test_concurrent_admissions_share_a_commit_and_each_id_is_one_turn(
    tmp_path: Path, anyio_backend: str
) -> None:
    log = await SqliteConversationLog.open(str(tmp_path / "b.db"), channel="C")
    assert await log.admit(message("old")) is not None
    ids = ["a", "b", "old", "a", "c", "b", "d"]  # one id from an earlier commit, two repeated
    results: list[Turn | None] = [None] * len(ids)

    async def admit(index: int) -> None:
        results[index] = await log.admit(message(ids[index], author=f"u{index}"))

    commits = log.commits
    async with anyio.create_task_group() as tg:
        for index in range(len(ids)):
            tg.start_soon(admit, index)
    if anyio_backend == "asyncio":  # trio may run the hand-over before every task queued
        assert log.commits - commits == 1
    admitted = sorted((turn for turn in results if turn is not None), key=lambda t: t.seq)
    # one caller of each new id got its turn (trio runs the tasks in any order); "old" got None
    assert sorted(turn.message_id for turn in admitted) == ["a", "b", "c", "d"]
    assert len({turn.seq for turn in admitted}) == 4
    stamps = [turn.inserted_at for turn in admitted]
    assert stamps == sorted(stamps)
    read = [r for r in await log.read(after_seq=0) if isinstance(r, Turn)]
    assert read[1:] == admitted  # what each caller got is exactly what the log holds
    for index, turn in enumerate(results):
        if turn is not None:
            assert turn.author == f"u{index}" and turn.text == f"text {ids[index]}"
    assert (await log.statistics()).turns_admitted == 5
    await log.aclose()


async def test_a_batch_keeps_queue_order_across_kinds_and_seqs_never_go_back(
    tmp_path: Path, anyio_backend: str
) -> None:
    path = str(tmp_path / "b.db")
    log = await SqliteConversationLog.open(path, channel="C")
    first = await log.admit(message("first"))
    assert first is not None
    created: dict[str, Turn | Frame | None] = {}

    async def admit(mid: str) -> None:
        created[mid] = await log.admit(message(mid))

    async def frame() -> None:
        created["frame"] = await log.record_frame(first, "m1", "o1")

    commits = log.commits
    async with anyio.create_task_group() as tg:
        tg.start_soon(admit, "x")
        tg.start_soon(admit, "y")
        tg.start_soon(frame)
        tg.start_soon(admit, "z")
    if anyio_backend == "asyncio":  # turns, a frame between them, turns: one transaction
        assert log.commits - commits == 1
    mine = sorted((r for r in created.values() if r is not None), key=lambda r: r.seq)
    assert len(mine) == 4 and isinstance(mine[-1], Turn | Frame)
    assert await log.read(after_seq=first.seq) == mine  # each caller's seq is the log's
    seqs = [record.seq for record in mine]
    await log.aclose()

    # the newest records gone (pruned, say): a new one still gets a seq never used before
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("DELETE FROM log_records WHERE seq >= ?", (seqs[0],))
    conn.close()
    again = await SqliteConversationLog.open(path, channel="C")
    turn = await again.admit(message("after"))
    assert turn is not None and turn.seq > seqs[-1]
    await again.aclose()


async def test_closing_commits_what_is_queued_and_then_refuses_writes(tmp_path: Path) -> None:
    log = await SqliteConversationLog.open(str(tmp_path / "b.db"), channel="C")
    got: list[Turn | None] = []

    async def admit() -> None:
        got.append(await log.admit(message("queued")))

    async with anyio.create_task_group() as tg:
        tg.start_soon(admit)
        await anyio.wait_all_tasks_blocked()  # the write is queued (or committed already)
        await log.aclose()
    assert len(got) == 1 and got[0] is not None
    with pytest.raises(LogUnavailable, match="closed"):
        await log.admit(message("late"))
    reopened = await SqliteConversationLog.open(str(tmp_path / "b.db"), channel="C")
    assert [r.message_id for r in await reopened.read(after_seq=0) if isinstance(r, Turn)] == [
        "queued"
    ]
    await reopened.aclose()
