"""The Redis log's batched writes carry every value as it was given (ADR 0130, amended: a
batch's values travel as one JSON argument the script decodes)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import anyio
import pytest

from bridge_core.conversation import Frame, Turn
from bridge_core.ownership.redis_log import RedisConversationLog
from bridge_core.provider import InboundMessage
from bridge_core.testing.services import require_redis

pytestmark = pytest.mark.anyio

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


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # redis.asyncio


@pytest.fixture
async def log() -> AsyncIterator[RedisConversationLog]:
    prefix = "test-values-" + uuid.uuid4().hex[:10]
    handle = await RedisConversationLog.connect(require_redis(), channel="C", key_prefix=prefix)
    yield handle
    keys = [key async for key in handle.client.scan_iter(match=f"{prefix}:*")]
    if keys:
        await handle.client.delete(*keys)
    await handle.aclose()


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
