"""Once the channel is given up (``Unreachable``) nothing more is sent, so no outcome will ever
retire an agent: the notifier retires each ended agent at once instead, and its memory stays
bounded by the agents still running (ADR 0015), not by every agent that came and went."""

from __future__ import annotations

import anyio
import pytest
from bridge_slack import SLACK_BUDGET

from bridge_core.events import AgentFinished, AgentGone, AgentSpawned, Outcome, StatusChanged
from bridge_core.provider import Unreachable

pytestmark = pytest.mark.anyio


async def test_ended_agents_are_forgotten_once_the_channel_is_given_up(open_channel) -> None:
    async with open_channel(budget=SLACK_BUDGET) as ch:
        ch.provider.script_fault("fleet", Unreachable("token revoked"))
        ch.notifier.handle(AgentSpawned("first", "w"))
        ch.notifier.handle(AgentSpawned("in flight", "w"))
        await anyio.sleep_until(5.0)
        assert not ch.sender.healthy
        ch.notifier.handle(AgentFinished("first", "w", outcome=Outcome.DONE))
        for n in range(300):  # lone agents, bursts (summaries), holds that end early
            workspace = f"w{n % 7}"
            ch.notifier.handle(AgentSpawned(f"a{n}", workspace))
            ch.notifier.handle(StatusChanged(f"a{n}", workspace, status="x"))
            if n % 3 == 0:
                ch.notifier.handle(AgentGone(f"a{n}", workspace, reason="crashed"))
            await anyio.sleep(1.0)
            outcome = Outcome.FAILED if n % 5 == 0 else Outcome.DONE
            ch.notifier.handle(AgentFinished(f"a{n}", workspace, outcome=outcome))
        await anyio.sleep(30.0)  # past every hold
        assert ch.notifier.live_agents == 1  # "in flight", still running
        assert [a["agent"] for a in ch.notifier.live_view()] == ["in flight"]
        ch.notifier.handle(AgentGone("in flight", "w", reason="stopped"))
        assert ch.notifier.live_agents == 0 and ch.notifier.idle
        assert [e.op for e in ch.entries()] == ["error"]
