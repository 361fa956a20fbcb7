"""A streaming agent for the kill tests, loaded by the gateway child as
``streaming_agent:answer`` (this folder on its PYTHONPATH): each turn ``qN`` is answered with
``WORDS`` deltas, one every ``DELAY`` seconds, so a full answer takes a few seconds."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

import anyio

from bridge_core.conversation import LogRecord, Turn

WORDS = 60
DELAY = 0.05


def full_answer(question: str) -> str:
    return "".join(f"{question}-w{i} " for i in range(WORDS))


async def answer(turn: Turn, history: Sequence[LogRecord]) -> AsyncIterator[str]:
    for i in range(WORDS):
        await anyio.sleep(DELAY)
        yield f"{turn.text}-w{i} "
