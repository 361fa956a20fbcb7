"""A spawn at exactly the end of another spawn's hold counts within that hold, whichever task
the event loop runs first at that instant: the hold is decided at the first instant after it
ends. So the same spawns give the same messages on every run (ADR 0016: expected numbers are
exact); before, five spawns in two seconds gave one summary or five posts, run to run."""

from __future__ import annotations

import random

import anyio
import anyio.lowlevel
import pytest
from bridge_slack import SLACK_BUDGET

from bridge_core.events import AgentSpawned
from bridge_core.notify import Notifier
from bridge_core.providers.console import ConsoleProvider, ConsoleSettings
from bridge_core.sending import ChannelSender
from bridge_core.testing.clock import run_virtual

SPAWNS = [0.0, 0.5, 1.0, 1.5, 2.0]  # the last at exactly the first one's hold end (hold 2 s)


@pytest.mark.anyio
async def test_a_spawn_at_a_holds_end_counts_even_after_the_timer_ran(open_channel) -> None:
    async with open_channel(budget=SLACK_BUDGET) as ch:
        for n, at in enumerate(SPAWNS):
            await anyio.sleep_until(at)
            if at == SPAWNS[0] + ch.notifier.config.hold:
                await anyio.lowlevel.checkpoint()  # the notifier's timer, due now too, runs first
            ch.notifier.handle(AgentSpawned(f"a{n}", "w1"))
        await ch.until_idle()
        entries = ch.entries()
    assert [e.op for e in entries] == ["post"]
    assert "5 agents in [w1]" in entries[0].text


def _posts(seed: int) -> int:
    async def main() -> int:
        provider = ConsoleProvider(ConsoleSettings(output="none"), run_prefix="r")
        sender = ChannelSender(provider, channel="c", budget=SLACK_BUDGET, random=random.Random(1))
        notifier = Notifier("c", sender, capabilities=provider.capabilities)
        order = random.Random(seed)
        async with anyio.create_task_group() as group:
            group.start_soon(sender.run)
            group.start_soon(notifier.run)
            for n, at in enumerate(SPAWNS):
                await anyio.sleep_until(at)
                if order.random() < 0.5:
                    await anyio.lowlevel.checkpoint()
                notifier.handle(AgentSpawned(f"a{n}", "w1"))
            await anyio.sleep(30)
            group.cancel_scope.cancel()
        await provider.aclose()
        return sender.statistics().posts

    return run_virtual(main)


def test_the_same_spawns_give_the_same_posts_every_run() -> None:
    assert {_posts(seed) for seed in range(12)} == {1}
