"""A rendering that raises is contained to that message (ADR 0026): the channel goes on.

Discord and Teams measure text in UTF-16, and measuring a lone surrogate raises; an agent whose
name holds one used to end the channel's sender, and the gateway with it.
"""

from __future__ import annotations

import logging

import anyio
import pytest

from bridge_core.events import AgentFinished, AgentSpawned, Outcome, StatusChanged
from bridge_core.provider import LengthUnit

pytestmark = pytest.mark.anyio


async def test_an_agent_whose_message_cannot_be_rendered_stops_nothing_else(
    open_channel, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, "bridge_core.notify")
    async with open_channel(length_unit=LengthUnit.UTF16) as ch:
        ch.notifier.handle(AgentSpawned("bad\ud800", "w1"))
        ch.notifier.handle(AgentSpawned("good", "w1"))
        await anyio.sleep_until(10.0)
        ch.notifier.handle(StatusChanged("bad\ud800", "w1", status="step"))
        ch.notifier.handle(StatusChanged("good", "w1", status="step"))
        await anyio.sleep_until(20.0)
        ch.notifier.handle(AgentFinished("bad\ud800", "w1", outcome=Outcome.DONE, turns=1))
        ch.notifier.handle(AgentFinished("good", "w1", outcome=Outcome.DONE, turns=1))
        await ch.until_idle()
        # the channel still serves: a later agent gets its message
        ch.notifier.handle(AgentSpawned("later", "w1"))
        await ch.until_idle()
        assert ch.sender.healthy
        assert ch.notifier.live_agents == 1  # only "later": the unrenderable one was retired
        entries = ch.entries()
    good = [e.op for e in entries if " good [" in e.text]
    assert good == ["post", "edit", "edit"]
    assert [e.op for e in entries if " later [" in e.text] == ["post"]
    assert not any("bad" in e.text for e in entries)
    assert (
        ch.notifier.statistics().rejected == 3
    )  # spawn, status and end: one attempt each, no spin
    logged = [r.getMessage() for r in caplog.records]
    assert any("'fleet'" in m and "agent:bad" in m for m in logged), logged
    # contained by the notifier, where the message is known, before the sender had to
    assert ch.sender.statistics().contained == 0
