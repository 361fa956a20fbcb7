"""Notifier placement on virtual time: one host per channel, no overlap at a join, takeover at a
leave, over the in-memory conversation log (the same code path as Redis)."""

from __future__ import annotations

from collections.abc import Callable

import anyio
import pytest
import trio.testing

from bridge_core.ownership import MemoryConversationLog, MemoryLogStore
from bridge_core.runtime.placement import NotifierPlacement

CHANNELS = [f"channel-{i}" for i in range(24)]


@pytest.fixture
def anyio_backend() -> tuple[str, dict[str, object]]:
    return ("trio", {"clock": trio.testing.MockClock(autojump_threshold=0)})


def placement(store: MemoryLogStore, name: str) -> NotifierPlacement:
    return NotifierPlacement(
        MemoryConversationLog(store, channel="__gateways__"),
        gateway_id=name,
        settle=1.0,
        heartbeat=0.2,
        clock=anyio.current_time,
    )


def hosts(placements: list[NotifierPlacement]) -> dict[str, list[int]]:
    return {c: [i for i, p in enumerate(placements) if p.hosts(c)] for c in CHANNELS}


async def watch(
    placements: list[NotifierPlacement],
    seconds: float,
    check: Callable[[dict[str, list[int]]], None],
) -> None:
    end = anyio.current_time() + seconds
    while anyio.current_time() < end:
        check(hosts(placements))
        await anyio.sleep(0.01)


@pytest.mark.anyio
async def test_one_host_per_channel_through_a_join_and_a_leave() -> None:
    store = MemoryLogStore(clock=anyio.current_time)
    a, b, c = (placement(store, name) for name in ("gw-a", "gw-b", "gw-c"))

    def at_most_one(found: dict[str, list[int]]) -> None:
        assert all(len(h) <= 1 for h in found.values()), found

    async with anyio.create_task_group() as tg:
        tg.start_soon(a.run)
        tg.start_soon(b.run)
        await watch([a, b, c], 2.0, at_most_one)
        two = hosts([a, b])
        assert all(len(h) == 1 for h in two.values())
        assert {h[0] for h in two.values()} == {0, 1}  # both host some channels

        tg.start_soon(c.run)  # a join: channels move to c, never hosted twice meanwhile
        await watch([a, b, c], 2.0, at_most_one)
        three = hosts([a, b, c])
        assert all(len(h) == 1 for h in three.values())
        moved = [ch for ch in CHANNELS if three[ch] != two[ch]]
        assert moved and all(three[ch] == [2] for ch in moved)  # only what c won moved

        a.stop()  # a graceful leave: a's channels go to b and c at once, nothing else moves
        await watch([a, b, c], 1.0, at_most_one)
        after = hosts([a, b, c])
        assert all(len(h) == 1 and h[0] != 0 for h in after.values())
        assert all(after[ch] == three[ch] for ch in CHANNELS if three[ch] != [0])
        assert a.live_gateways == 0 or not any(a.hosts(ch) for ch in CHANNELS)
        tg.cancel_scope.cancel()
