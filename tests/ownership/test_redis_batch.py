"""The Redis log's pipelined scripts (ownership/redis_batch.py, ADR 0120): concurrent admissions
and frames share round trips, each still its own atomic script with its own answer; a server
that lost its scripts, or a connection that drops, is handled per call; and a batch's values,
sent as one JSON argument the script decodes (ADR 0130, amended), come back as they were given."""

from __future__ import annotations

import uuid

import anyio
import pytest

from bridge_core.conversation import Frame, Turn
from bridge_core.ownership import LogUnavailable
from bridge_core.ownership.redis_batch import MAX_WRITES
from bridge_core.ownership.redis_log import RedisConversationLog
from bridge_core.provider import InboundMessage
from bridge_core.testing.services import require_redis

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # redis.asyncio


@pytest.fixture
def log(redis_log: RedisConversationLog) -> RedisConversationLog:
    return redis_log


def message(mid: str) -> InboundMessage:
    return InboundMessage(message_id=mid, channel="C", author=f"u{mid}", text=mid, at=0.0)


async def test_concurrent_admissions_share_pipelines_and_each_gets_its_own_answer(
    log: RedisConversationLog,
) -> None:
    answers: list[tuple[str, Turn | None]] = []

    async def admit(mid: str) -> None:
        answers.append((mid, await log.admit(message(mid))))

    async with anyio.create_task_group() as tg:
        for n in range(40):
            tg.start_soon(admit, f"m{n % 30}")  # ten ids admitted twice at once
    turns = [turn for _mid, turn in answers if turn is not None]
    assert len(answers) == 40 and len(turns) == 30  # each id's second call got None
    assert sorted(turn.message_id for turn in turns) == sorted(f"m{n}" for n in range(30))
    assert log._batch.pipelines < 40  # batched (a lone call would make one pipeline each)
    records = await log.read(after_seq=0, limit=100)
    assert [record.seq for record in records] == sorted(turn.seq for turn in turns)
    assert (await log.statistics()).turns_admitted == 30
    frames = []
    async with anyio.create_task_group() as tg:
        for turn in turns:

            async def answer(turn: Turn = turn) -> None:
                frames.append(await log.record_frame(turn, "m1", "o"))

            tg.start_soon(answer)
    assert len({frame.seq for frame in frames}) == 30
    assert (await log.statistics()).turns_answered == 30


async def test_a_server_that_lost_its_scripts_runs_each_call_once(
    log: RedisConversationLog,
) -> None:
    assert await log.admit(message("before")) is not None
    await log.client.script_flush()  # as after a restart without persistence of scripts
    async with anyio.create_task_group() as tg:
        for n in range(5):
            tg.start_soon(log.admit, message(f"after{n}"))
    records = [record for record in await log.read(after_seq=0, limit=100)]
    ids = [record.message_id for record in records if isinstance(record, Turn)]
    assert len(ids) == len(records) == 6  # each call ran once: no lost, no doubled turn
    assert ids[0] == "before" and sorted(ids[1:]) == [f"after{n}" for n in range(5)]
    assert (await log.statistics()).turns_admitted == 6


async def test_a_dropped_connection_fails_every_waiting_call_as_log_unavailable() -> None:
    prefix = "test-batch-" + uuid.uuid4().hex[:10]
    log = await RedisConversationLog.connect(require_redis(), channel="C", key_prefix=prefix)
    await log.client.connection_pool.disconnect()
    log.client.connection_pool.connection_kwargs["port"] = 1  # nothing listens there
    log.client.connection_pool.reset()
    failures: list[BaseException] = []

    async def admit(n: int) -> None:
        try:
            await log.admit(message(f"x{n}"))
        except LogUnavailable as error:
            failures.append(error)

    async with anyio.create_task_group() as tg:
        for n in range(4):
            tg.start_soon(admit, n)
    assert len(failures) == 4
    assert len({id(error) for error in failures}) == 4  # each caller raises its own error
    await log.aclose()


async def test_a_batch_longer_than_one_call_after_a_script_flush_admits_each_id_once(
    log: RedisConversationLog,
) -> None:
    """More concurrent writes than one script call takes (split into calls of MAX_WRITES in
    one pipeline), with duplicates in and across calls, on a server that lost the script."""
    await log.client.script_flush()
    answers: list[tuple[str, Turn | None]] = []

    async def admit(mid: str) -> None:
        answers.append((mid, await log.admit(message(mid))))

    async with anyio.create_task_group() as tg:
        for n in range(MAX_WRITES * 2 + 50):
            tg.start_soon(admit, f"m{n % 200}")  # 106 ids admitted twice at once
    turns = [turn for _mid, turn in answers if turn is not None]
    assert len(answers) == MAX_WRITES * 2 + 50 and len(turns) == 200
    assert sorted(turn.message_id for turn in turns) == sorted(f"m{n}" for n in range(200))
    assert log._batch.pipelines < 20
    records = await log.read(after_seq=0, limit=1000)
    assert [record.seq for record in records] == sorted(turn.seq for turn in turns)
    assert [r.message_id for r in records if isinstance(r, Turn)] == [
        turn.message_id for turn in sorted(turns, key=lambda turn: turn.seq)
    ]
    assert (await log.statistics()).turns_admitted == 200


# any text a platform may send: the JSON argument must carry each unchanged
TEXTS = [
    "",
    "plain",
    'quotes " and \\ backslashes \\" and {"json": [1, 2]}',
    "NUL \x00 inside, tab \t, newline \n, CR \r, other controls \x01\x1f\x7f",
    "ü é 漢字 😀 \u2028\u2029 \ufeff",
    "x" * 70_000,
    "null",
    "123",
]


async def test_values_of_one_batch_come_back_as_they_were_given(
    log: RedisConversationLog,
) -> None:
    got: dict[int, Turn | None] = {}

    async def admit(index: int) -> None:
        message = InboundMessage(
            message_id=f"id \x00 {index} ü",
            channel="C",
            author=f"author {TEXTS[index][:20]}",
            text=TEXTS[index],
            at=0.0,
            thread=None if index % 2 else f"thread {index} \x00 😀",
        )
        got[index] = await log.admit(message)

    pipelines = log._batch.pipelines
    async with anyio.create_task_group() as tg:
        for index in range(len(TEXTS)):
            tg.start_soon(admit, index)
    assert log._batch.pipelines - pipelines < len(TEXTS)  # they did share calls
    turns = {index: turn for index, turn in got.items() if turn is not None}
    assert len(turns) == len(TEXTS)
    for index, turn in turns.items():
        assert turn.text == TEXTS[index]
    read = {record.seq: record for record in await log.read(after_seq=0, limit=100)}
    for index, turn in turns.items():
        assert read[turn.seq] == turn  # what was appended is what the caller was told
        assert turn.message_id == f"id \x00 {index} ü"
        assert turn.thread == (None if index % 2 else f"thread {index} \x00 😀")
    frames: list[Frame] = []

    async def answer(turn: Turn) -> None:
        frames.append(await log.record_frame(turn, 'member "\x00" ü', "obligation\\"))

    async with anyio.create_task_group() as tg:
        for turn in turns.values():
            tg.start_soon(answer, turn)
    read = {record.seq: record for record in await log.read(after_seq=0, limit=100)}
    for frame in frames:
        assert read[frame.seq] == frame
        assert frame.member == 'member "\x00" ü' and frame.obligation == "obligation\\"
    assert sorted(frame.answers_seq for frame in frames) == sorted(t.seq for t in turns.values())
