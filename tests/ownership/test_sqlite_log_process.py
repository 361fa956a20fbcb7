"""The SQLite log's writer process (ADR 0189): a child of its own that ends with the handle,
fails loudly when it dies, and falls back to the thread only when asked to ("auto")."""

from __future__ import annotations

import logging
import os
import signal
import sys
from pathlib import Path

import anyio
import pytest

from bridge_core.conversation import Turn
from bridge_core.ownership import LogUnavailable
from bridge_core.ownership.sqlite_log import SqliteConversationLog
from bridge_core.provider import InboundMessage

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the writer process is asyncio's; trio's handles write on the thread


def message(number: int) -> InboundMessage:
    return InboundMessage(
        message_id=f"m{number}", channel="C", author=f"u{number % 3}", text="hi", at=0.0
    )


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def reaped(pid: int) -> bool:
    """Whether ``pid`` is gone within a few seconds (it is its parent's to reap: ours)."""
    with anyio.move_on_after(5):
        while alive(pid):
            try:
                os.waitpid(pid, os.WNOHANG)  # noqa: ASYNC222 (WNOHANG: never waits)
            except ChildProcessError:
                pass
            await anyio.sleep(0.01)
    return not alive(pid)


async def test_concurrent_admissions_commit_in_the_child_and_closing_ends_it(
    tmp_path: Path,
) -> None:
    log = await SqliteConversationLog.open(str(tmp_path / "b.db"), channel="C", writer="process")
    pid = log.writer_pid
    assert pid is not None and pid != os.getpid() and alive(pid)
    turns: list[Turn | None] = [None] * 40

    async def admit(number: int) -> None:
        turns[number] = await log.admit(message(number))

    async with anyio.create_task_group() as tg:
        for number in range(40):
            tg.start_soon(admit, number)
    assert [turn.message_id for turn in turns if turn] == [f"m{n}" for n in range(40)]
    assert len({turn.seq for turn in turns if turn}) == 40
    assert log.commits < 40  # concurrent admissions shared commits
    assert await log.admit(message(7)) is None  # a replay, dropped by the child's dedup
    # what the child committed is in the file for every reader, in order
    records = await log.read(after_seq=0, limit=100)
    assert [record.message_id for record in records if isinstance(record, Turn)] == [
        f"m{n}" for n in range(40)
    ]
    queued = log.admit(message(99))  # queued, not yet sent when closing starts
    async with anyio.create_task_group() as tg:
        tg.start_soon(log.aclose)
        turn = await queued
    assert turn is not None and turn.message_id == "m99"
    assert await reaped(pid)
    with pytest.raises(LogUnavailable):
        await log.admit(message(100))


async def test_a_killed_writer_fails_its_writes_and_says_to_restart(tmp_path: Path) -> None:
    log = await SqliteConversationLog.open(str(tmp_path / "b.db"), channel="C", writer="process")
    assert await log.admit(message(1)) is not None
    pid = log.writer_pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    assert await reaped(pid)
    with pytest.raises(LogUnavailable, match=r"is gone.*restart"):
        with anyio.fail_after(5):
            await log.admit(message(2))
    with pytest.raises(LogUnavailable, match="is gone"):  # and every later write
        await log.record_frame(Turn("C", "C/u", 1, 0.0, "m1", "u", "hi", None), "m", "o")
    await log.aclose()


@pytest.mark.parametrize("writer", ["auto", "process"])
async def test_a_child_that_cannot_start_fails_or_falls_back_as_asked(
    tmp_path: Path,
    writer: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-such-python"))
    path = str(tmp_path / "b.db")
    if writer == "process":
        with pytest.raises(LogUnavailable, match=r"did not start.*no-such-python"):
            await SqliteConversationLog.open(path, channel="C", writer="process")
        return
    with caplog.at_level(logging.WARNING):
        log = await SqliteConversationLog.open(path, channel="C", writer="auto")
    assert log.writer_pid is None
    assert "the writer thread takes every write instead" in caplog.text
    turn = await log.admit(message(1))
    assert turn is not None and turn.seq == 1
    await log.aclose()


async def test_the_process_takes_no_clock_of_its_own(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="system's wall clock"):
        await SqliteConversationLog.open(
            str(tmp_path / "b.db"), channel="C", writer="process", clock=lambda: 0.0
        )
    with pytest.raises(ValueError, match="'auto', 'thread' or 'process'"):
        await SqliteConversationLog.open(
            str(tmp_path / "b.db"),
            channel="C",
            writer="child",  # type: ignore[arg-type]
        )
