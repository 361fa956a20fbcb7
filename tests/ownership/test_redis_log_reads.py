"""The Redis log's reads on the handle's own connection, against the real Redis: a read
cancelled while it blocks leaves no reply behind for the next one, and reads at once on one
handle each get their own answer."""

from __future__ import annotations

import anyio
import pytest

from bridge_core.conversation import Turn
from bridge_core.ownership.redis_log import RedisConversationLog
from bridge_core.provider import InboundMessage

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # redis.asyncio


def message(number: int) -> InboundMessage:
    return InboundMessage(message_id=f"m{number}", channel="C", author="u", text="hi", at=0.0)


async def test_a_read_cancelled_while_it_blocks_leaves_nothing_for_the_next(
    redis_log: RedisConversationLog,
) -> None:
    log = redis_log
    first = await log.admit(message(1))
    assert first is not None
    with anyio.move_on_after(0.2) as scope:
        await log.read(after_seq=first.seq, wait=1.5)  # blocks: nothing after the first turn
    assert scope.cancelled_caught
    second = await log.admit(message(2))  # what the cancelled XREAD would have been told
    assert second is not None
    records = await log.read(after_seq=0)
    assert [record.message_id for record in records if isinstance(record, Turn)] == ["m1", "m2"]
    assert [r.seq for r in await log.read(after_seq=first.seq)] == [second.seq]
    assert await log.read(after_seq=second.seq) == []


async def test_reads_at_once_on_one_handle_each_get_their_answer(
    redis_log: RedisConversationLog,
) -> None:
    log = redis_log
    turns = [await log.admit(message(number)) for number in range(6)]
    seqs = [turn.seq for turn in turns if turn is not None]
    got: dict[int, list[int]] = {}

    async def read_after(index: int) -> None:
        records = await log.read(after_seq=seqs[index], wait=0.5)
        got[index] = [record.seq for record in records]

    async with anyio.create_task_group() as tg:
        for index in range(5):  # one holds the handle's connection, the others use the pool
            tg.start_soon(read_after, index)
    assert got == {index: seqs[index + 1 :] for index in range(5)}
