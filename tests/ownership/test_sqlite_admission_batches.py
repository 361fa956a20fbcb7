"""The SQLite log's writer with big and cancelled batches (ADR 0178): the dedup check and the
record of an id are one statement, callers wait on futures of their own."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from bridge_core.conversation import Turn
from bridge_core.ownership.sqlite_log import SqliteConversationLog
from bridge_core.provider import InboundMessage

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def message(mid: str, author: str = "alice") -> InboundMessage:
    return InboundMessage(message_id=mid, channel="C", author=author, text=f"text {mid}", at=0.0)


async def admit_at_once(log: SqliteConversationLog, ids: list[str]) -> list[Turn | None]:
    """Admits each id from a task of its own, all started before any commits; each result
    where its id stands."""
    results: list[Turn | None] = [None] * len(ids)

    async def admit(index: int) -> None:
        results[index] = await log.admit(message(ids[index], author=f"u{index}"))

    async with anyio.create_task_group() as tg:
        for index in range(len(ids)):
            tg.start_soon(admit, index)
    return results


async def test_more_ids_than_one_statement_takes_each_admitted_once(
    tmp_path: Path, anyio_backend: str
) -> None:
    log = await SqliteConversationLog.open(str(tmp_path / "b.db"), channel="C")
    assert await log.admit(message("seen")) is not None
    # 1,200 admissions: ids repeated inside one 500-id statement and across two of them,
    # and one id from an earlier commit
    ids = [f"m{i % 900}" for i in range(1200)] + ["seen"]
    results = await admit_at_once(log, ids)
    admitted = [turn for turn in results if turn is not None]
    assert sorted(turn.message_id for turn in admitted) == sorted(f"m{i}" for i in range(900))
    read = [r for r in await log.read(after_seq=0, limit=5000) if isinstance(r, Turn)]
    assert read[1:] == sorted(admitted, key=lambda turn: turn.seq)
    seqs = [turn.seq for turn in read]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))  # given in order, none skipped
    assert (await log.statistics()).turns_admitted == 901
    await log.aclose()


async def test_a_cancelled_caller_leaves_its_write_and_the_others_to_commit(
    tmp_path: Path, anyio_backend: str
) -> None:
    log = await SqliteConversationLog.open(str(tmp_path / "b.db"), channel="C")
    got: dict[str, Turn | None] = {}

    async def admit(mid: str) -> None:
        got[mid] = await log.admit(message(mid))

    async with anyio.create_task_group() as tg:
        with anyio.CancelScope() as scope:
            tg.start_soon(admit, "kept")
            async with anyio.create_task_group() as cancelled:
                cancelled.start_soon(admit, "abandoned")
                await anyio.wait_all_tasks_blocked()
                cancelled.cancel_scope.cancel()
        assert not scope.cancel_called
    assert "abandoned" not in got and got["kept"] is not None
    # the abandoned caller's write committed all the same; a replay of it is a duplicate
    assert await log.admit(message("abandoned")) is None
    assert sorted(r.message_id for r in await log.read(after_seq=0) if isinstance(r, Turn)) == [
        "abandoned",
        "kept",
    ]
    await log.aclose()


async def test_an_id_repeated_in_one_batch_of_new_ids_is_admitted_once(
    tmp_path: Path, anyio_backend: str
) -> None:
    log = await SqliteConversationLog.open(str(tmp_path / "b.db"), channel="C")
    ids = ["a", "b", "a", "c", "b", "a"]
    results = await admit_at_once(log, ids)
    admitted = sorted((turn for turn in results if turn is not None), key=lambda t: t.seq)
    assert sorted(turn.message_id for turn in admitted) == ["a", "b", "c"]
    read = [r for r in await log.read(after_seq=0) if isinstance(r, Turn)]
    assert read == admitted
    assert (await log.statistics()).turns_admitted == 3
    await log.aclose()
