"""``MessageRejected``: the platform refused one rendering; the channel and every agent go on.

The console's platform here refuses any text that contains a word of ``refusing`` (see
``RefusingConsole`` in the conftest), the way Slack refuses ``msg_too_long`` or Teams a 413.
"""

from __future__ import annotations

import itertools
import logging

import anyio
import pytest
from bridge_slack import SLACK_BUDGET

from bridge_core.events import AgentFinished, AgentSpawned, Outcome, StatusChanged
from bridge_core.testing.budget import assert_paced

pytestmark = pytest.mark.anyio


def _of(entries, name: str):
    return [e for e in entries if f" {name} [" in e.text]


async def test_a_refused_edit_keeps_the_message_and_later_updates_go_on(open_channel) -> None:
    async with open_channel(budget=SLACK_BUDGET, refusing={"UNSENDABLE"}) as ch:
        ch.notifier.handle(AgentSpawned("alpha", "w1"))
        ch.notifier.handle(AgentSpawned("beta", "w1"))
        await anyio.sleep_until(10.0)
        ch.notifier.handle(StatusChanged("alpha", "w1", status="UNSENDABLE table"))
        ch.notifier.handle(StatusChanged("beta", "w1", status="reading"))
        await anyio.sleep_until(20.0)
        ch.notifier.handle(StatusChanged("alpha", "w1", status="writing"))
        ch.notifier.handle(StatusChanged("beta", "w1", status="testing"))
        await anyio.sleep_until(30.0)
        ch.notifier.handle(AgentFinished("alpha", "w1", outcome=Outcome.DONE, turns=2))
        ch.notifier.handle(AgentFinished("beta", "w1", outcome=Outcome.DONE, turns=3))
        await ch.until_idle()
        assert ch.sender.healthy and ch.notifier.statistics().rejected == 1
        entries = ch.entries()
    alpha = _of(entries, "alpha")
    assert [(e.t, e.op) for e in alpha] == [
        (2.0, "post"),
        (10.0, "error"),  # refused once, never sent again
        (20.0, "edit"),
        (30.0, "edit"),
    ]
    assert len({e.message_id for e in alpha if e.op != "error"}) == 1, "the ref is kept"
    assert [(e.t, e.op) for e in _of(entries, "beta")] == [
        (2.0, "post"),
        (10.0, "edit"),
        (20.0, "edit"),
        (30.0, "edit"),
    ]
    assert set(ch.waits) == {"alpha", "beta"}
    assert_paced([e for e in entries if e.op != "error"], SLACK_BUDGET)


async def test_a_refused_post_leaves_no_ref_and_the_next_update_posts(open_channel) -> None:
    refusing = {"UNSENDABLE"}
    async with open_channel(budget=SLACK_BUDGET, refusing=refusing) as ch:
        ch.notifier.handle(AgentSpawned("alpha", "w1", title="UNSENDABLE title"))
        ch.notifier.handle(AgentSpawned("beta", "w1"))
        await anyio.sleep_until(5.0)
        ch.notifier.handle(StatusChanged("alpha", "w1", status="step 1"))
        await anyio.sleep_until(8.0)
        refusing.clear()  # the platform would take this rendering
        await anyio.sleep_until(9.0)
        assert [e.op for e in _of(ch.entries(), "alpha")] == ["error", "error"]
        ch.notifier.handle(StatusChanged("alpha", "w1", status="step 2"))
        await ch.until_idle()
        entries = ch.entries()
    alpha = _of(entries, "alpha")
    assert [(e.t, e.op) for e in alpha] == [(2.0, "error"), (5.0, "error"), (9.0, "post")]
    assert "step 2" in alpha[-1].text
    assert [(e.t, e.op) for e in _of(entries, "beta")] == [(2.0, "post")]


@pytest.mark.parametrize("posted_first", [True, False], ids=["edits", "posts"])
async def test_a_rendering_refused_every_time_is_tried_once_per_update_at_most_paced(
    open_channel, caplog: pytest.LogCaptureFixture, posted_first: bool
) -> None:
    caplog.set_level(logging.DEBUG, logger="bridge_core.notify")
    refusing: set[str] = set() if posted_first else {"alpha"}
    async with open_channel(budget=SLACK_BUDGET, refusing=refusing) as ch:
        ch.notifier.handle(AgentSpawned("alpha", "w1"))
        ch.notifier.handle(AgentSpawned("beta", "w1"))
        await anyio.sleep_until(3.0)
        refusing.add("alpha")  # from now on every rendering of alpha is refused
        for n in range(600):  # an update every 0.1 s for a minute
            await anyio.sleep_until(3.0 + 0.1 * n)
            ch.notifier.handle(StatusChanged("alpha", "w1", status=f"alpha step {n}"))
            if n % 50 == 0:
                ch.notifier.handle(StatusChanged("beta", "w1", status=f"beta step {n}"))
        await anyio.sleep_until(120.0)
        assert ch.notifier.idle and ch.sender.idle
        assert ch.sender.healthy
        entries = ch.entries()
    refused = [e for e in entries if e.op == "error"]
    assert refused and all(" alpha [" in e.text for e in refused)
    times = [e.t for e in refused]
    # One try per edit slot at most: never faster than the message's normal pacing.
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert all(gap >= SLACK_BUDGET.edit_spacing for gap in gaps), gaps
    assert len(times) <= 60 / SLACK_BUDGET.edit_spacing + 2
    assert times[-1] <= 63.0 + SLACK_BUDGET.edit_spacing, "no tries after the updates stopped"
    assert len(_of([e for e in entries if e.op == "edit"], "beta")) == 12  # beta unaffected
    warnings = [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.WARNING and "refused" in r.getMessage()
    ]
    assert len(warnings) == 1, "one warning per run of refusals, not one per update"
    assert "'fleet'" in warnings[0] and "'alpha'" in warnings[0] and "refused" in warnings[0]


async def test_a_refused_final_state_ends_the_agents_message(open_channel) -> None:
    async with open_channel(budget=SLACK_BUDGET, refusing={"$9.99"}) as ch:
        ch.notifier.handle(AgentSpawned("alpha", "w1"))
        await anyio.sleep_until(5.0)
        ch.notifier.handle(AgentFinished("alpha", "w1", outcome=Outcome.DONE, cost=9.99))
        await anyio.sleep_until(10.0)
        # A refused final state is not kept in memory: the agent is done with.
        assert ch.notifier.idle and ch.notifier.live_agents == 0
        ch.notifier.handle(StatusChanged("alpha", "w1", status="late news"))  # ignored
        ch.notifier.handle(AgentSpawned("beta", "w1"))
        await ch.until_idle()
        entries = ch.entries()
    assert [(e.t, e.op) for e in _of(entries, "alpha")] == [(2.0, "post"), (5.0, "error")]
    assert [(e.t, e.op) for e in _of(entries, "beta")] == [(12.0, "post")]
    assert "alpha" not in ch.waits  # refused, so not counted as delivered


async def test_a_refused_summary_renders_again_at_the_next_change(open_channel) -> None:
    refusing = {"agents in"}
    async with open_channel(budget=SLACK_BUDGET, refusing=refusing) as ch:
        for n in range(5):
            ch.notifier.handle(AgentSpawned(f"s{n}", "w1"))
        await anyio.sleep_until(10.0)
        refusing.clear()
        await anyio.sleep_until(20.0)
        assert [e.op for e in ch.entries()] == ["error"], "a refused summary is not resent"
        ch.notifier.handle(AgentFinished("s0", "w1", outcome=Outcome.DONE))
        await ch.until_idle()
        entries = ch.entries()
    assert [(e.t, e.op) for e in entries] == [(2.0, "error"), (20.0, "post")]
    assert "1 done" in entries[-1].text and "4 running" in entries[-1].text
