"""Fleet events through Redis streams (the real server): what a channel's new host reads."""

from __future__ import annotations

import secrets
from typing import Any

import anyio
import pytest

from bridge_core.events import AgentFinished, AgentSpawned, FleetEvent, Outcome, StatusChanged
from bridge_core.runtime.placement import FleetBus
from bridge_core.testing.services import require_redis


@pytest.mark.anyio
async def test_a_new_host_restates_running_agents_then_follows_from_the_cursor() -> None:
    bus = FleetBus.connect(require_redis(), prefix=f"test{secrets.token_hex(4)}")
    try:
        await bus.publish(
            ["ops", "dev"],
            [AgentSpawned("a1", "w", title="first"), AgentSpawned("a2", "w"), AgentSpawned("a3")],
        )
        await bus.publish(["ops"], [StatusChanged("a1", "w", status="old")])
        await bus.publish(
            ["ops"],
            [
                StatusChanged("a1", "w", status="latest"),
                AgentFinished("a2", "w", outcome=Outcome.DONE),
                StatusChanged("a4", "w", status="seen mid-way"),
            ],
        )
        redis: Any = bus._redis
        [(last_id, _)] = await redis.xrevrange(bus._stream("ops"), count=1)
        await redis.set(bus._cursor("ops"), last_id)  # the previous host got this far

        seen: list[FleetEvent] = []
        calls: list[int] = []  # events per call: one call restates, then one per stream entry

        def take(events: list[FleetEvent]) -> None:
            calls.append(len(events))
            seen.extend(events)

        async with anyio.create_task_group() as tg:
            tg.start_soon(bus.follow, "ops", take)
            with anyio.fail_after(5):
                while len(seen) < 5:  # noqa: ASYNC110 - the bus has no event to wait on
                    await anyio.sleep(0.01)
            await bus.publish(["ops"], [StatusChanged("a3", status="after the handover")])
            with anyio.fail_after(5):
                while len(seen) < 6:  # noqa: ASYNC110
                    await anyio.sleep(0.01)
            tg.cancel_scope.cancel()
        assert seen == [
            AgentSpawned("a1", "w", title="first"),
            StatusChanged("a1", "w", status="latest"),
            AgentSpawned("a3"),
            AgentSpawned("a4", "w"),
            StatusChanged("a4", "w", status="seen mid-way"),
            StatusChanged("a3", status="after the handover"),
        ]
        assert calls == [5, 1]
        # the cursor moved past what this host handled
        assert await redis.get(bus._cursor("ops")) != last_id
        # a channel's first host ever reads the whole stream
        first: list[FleetEvent] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(bus.follow, "dev", first.extend)
            with anyio.fail_after(5):
                while len(first) < 3:  # noqa: ASYNC110
                    await anyio.sleep(0.01)
            tg.cancel_scope.cancel()
        assert [e.agent for e in first] == ["a1", "a2", "a3"]
    finally:
        await bus.aclose()
