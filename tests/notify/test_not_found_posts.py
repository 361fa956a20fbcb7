"""A post answered ``NotFound``: there is no channel or thread to post in (Discord answers a bare
404 so, Matrix a thread with an unknown root), not a deleted message. Posting again meets the
same answer, so the notifier reads it as a refusal (ADR 0017): that rendering is dropped, a final
state retires its agent, and the channel is never spun. An edit answered ``NotFound`` still means
the message was deleted, and the next update posts a new one (test_rules, test_scenarios).

The console's platform here answers ``NotFound`` to any post whose text holds a word of
``missing`` (``RefusingConsole`` in the conftest)."""

from __future__ import annotations

import anyio
import pytest
from bridge_slack import SLACK_BUDGET

from bridge_core.events import AgentFinished, AgentSpawned, Outcome, StatusChanged

pytestmark = pytest.mark.anyio


def _of(entries, name: str):
    return [e for e in entries if f" {name} [" in e.text]


async def test_a_final_post_answered_not_found_is_tried_once(open_channel) -> None:
    async with open_channel(budget=SLACK_BUDGET, missing={"alpha"}) as ch:
        ch.notifier.handle(AgentSpawned("alpha", "w1"))
        ch.notifier.handle(AgentFinished("alpha", "w1", outcome=Outcome.FAILED))
        await anyio.sleep_until(600.0)
        assert ch.notifier.live_agents == 0 and ch.notifier.idle
        ch.notifier.handle(AgentSpawned("beta", "w1"))
        await ch.until_idle()
        entries = ch.entries()
        assert ch.sender.healthy and ch.notifier.statistics().rejected == 1
    assert [(e.t, e.op) for e in _of(entries, "alpha")] == [(2.0, "error")]
    assert [(e.t, e.op) for e in _of(entries, "beta")] == [(602.0, "post")]
    assert "alpha" not in ch.waits  # not delivered, so not counted as delivered


async def test_a_live_post_answered_not_found_waits_for_the_next_update(open_channel) -> None:
    missing = {"alpha"}
    async with open_channel(budget=SLACK_BUDGET, missing=missing) as ch:
        ch.notifier.handle(AgentSpawned("alpha", "w1"))
        await anyio.sleep_until(60.0)
        assert [e.op for e in ch.entries()] == ["error"], "one try, not one per edit slot"
        ch.notifier.handle(StatusChanged("alpha", "w1", status="reading"))
        await anyio.sleep_until(120.0)
        missing.clear()
        ch.notifier.handle(StatusChanged("alpha", "w1", status="writing"))
        await anyio.sleep_until(130.0)
        ch.notifier.handle(AgentFinished("alpha", "w1", outcome=Outcome.DONE))
        await ch.until_idle()
        entries = ch.entries()
    assert [(e.t, e.op) for e in entries] == [
        (2.0, "error"),
        (60.0, "error"),
        (120.0, "post"),
        (130.0, "edit"),
    ]
    assert ch.notifier.live_agents == 0 and "alpha" in ch.waits
