"""Concurrent record/claim/settle calls share statements and commits, on SQLite and PostgreSQL;
one bad item in a shared statement fails alone, and a row raced within one gathering has one
winner."""

from __future__ import annotations

import anyio
import pytest

from bridge_core.ledger import Reply, State
from bridge_core.provider import MessageRef

from .conftest import Harness

pytestmark = pytest.mark.anyio


def _reply(key: str, text: str = "text") -> Reply:
    return Reply(obligation_id=key, profile="X", platform="p", channel="c", text=text)


async def test_one_bad_reply_among_concurrent_records_fails_alone(harness: Harness) -> None:
    if harness.kind == "memory":
        pytest.skip("the memory store shares no statements")
    store = await harness.store(me=True)
    outcomes: dict[str, object] = {}

    async def record(key: str, text: str) -> None:
        try:
            outcomes[key] = await store.record(_reply(key, text), now=1.0)
        except Exception as error:  # the bad one: a text no store column can hold
            outcomes[key] = error

    async with anyio.create_task_group() as group:
        for index in range(50):
            group.start_soon(record, f"k{index}", "bad \ud800 surrogate" if index == 7 else "ok")
    assert isinstance(outcomes.pop("k7"), Exception)
    assert all(result[1] for result in outcomes.values())  # type: ignore[index]
    assert await store.get("k7") is None
    for key in outcomes:
        assert await store.get(key) is not None


async def test_concurrent_claims_of_one_row_have_one_winner_then_it_settles(
    harness: Harness,
) -> None:
    store = await harness.store(me=True)
    await store.record(_reply("raced"), now=1.0)
    won: list[int] = []

    async def claim() -> None:
        row = await store.claim("raced", fence=0, now=2.0)
        if row is not None:
            won.append(row.fence)

    async with anyio.create_task_group() as group:
        for _ in range(20):
            group.start_soon(claim)
    assert won == [1]
    done = await store.settle(
        "raced", fence=1, state=State.DELIVERED, now=3.0, ref=MessageRef("c", "m", None)
    )
    assert done is not None and done == await store.get("raced")
    assert done.state is State.DELIVERED and done.delivered == (MessageRef("c", "m", None),)
