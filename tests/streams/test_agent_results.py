"""What an agent may hand back (``deltas_of``): a text, an async iterator of deltas, an object
with ``stream()``; anything else is refused naming what it got."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from bridge_core.streams import StreamTypeError, deltas_of

pytestmark = pytest.mark.anyio


async def words() -> AsyncIterator[str]:
    for word in ("a", "b", "c"):
        yield word


class SyncStream:
    def stream(self) -> AsyncIterator[str]:
        return words()


class AsyncStream:
    async def stream(self) -> AsyncIterator[str]:
        return words()


async def collect(result: object) -> str | list[str]:
    got = await deltas_of(result)
    if isinstance(got, str):
        return got
    return [delta async for delta in got]


async def test_a_text_is_the_whole_reply() -> None:
    assert await collect("hello") == "hello"


@pytest.mark.parametrize("result", [words, SyncStream, AsyncStream])
async def test_iterators_and_stream_objects_give_their_deltas(result: type) -> None:
    assert await collect(result()) == ["a", "b", "c"]


async def test_anything_else_is_refused_naming_it() -> None:
    with pytest.raises(StreamTypeError, match="returned int"):
        await deltas_of(42)


async def test_a_delta_that_is_not_text_is_refused_naming_it() -> None:
    async def bad() -> AsyncIterator[object]:
        yield "fine"
        yield b"bytes"

    with pytest.raises(StreamTypeError, match="yielded bytes"):
        await collect(bad())
