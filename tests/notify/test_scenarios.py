"""Seed ADR 0007's table, scenarios A to F, with exact numbers on virtual time.

Assertions read only the console provider's transcript, checked by the independent budget and
spacing checker in ``bridge_core.testing.budget``.
"""

from __future__ import annotations

import random
import re

import anyio
import pytest
from bridge_discord import DISCORD_BUDGET
from bridge_slack import SLACK_BUDGET
from bridge_teams import TEAMS_BUDGET

from bridge_core.events import AgentFinished, AgentSpawned, Outcome, StatusChanged
from bridge_core.provider import Forbidden, NotFound, RateLimited
from bridge_core.testing.budget import assert_paced, max_in_window

pytestmark = pytest.mark.anyio


def _texts_of(entries, message_id):
    return [e for e in entries if e.message_id == message_id and e.op != "error"]


async def test_a_one_chatty_agent(open_channel) -> None:
    async with open_channel(budget=SLACK_BUDGET) as ch:
        ch.notifier.handle(AgentSpawned("a1", "w1", title="refactor the parser"))
        for i in range(20):
            await anyio.sleep_until(0.15 * (i + 1))
            ch.notifier.handle(StatusChanged("a1", "w1", status=f"step {i}"))
        await anyio.sleep_until(10.0)
        ch.notifier.handle(AgentFinished("a1", "w1", outcome=Outcome.DONE, cost=0.42, turns=17))
        await ch.until_idle()
        entries = ch.entries()
    assert [(e.t, e.op) for e in entries] == [(2.0, "post"), (4.0, "edit"), (10.0, "edit")]
    assert len({e.message_id for e in entries}) == 1
    assert "a1" in entries[0].text and "step 12" in entries[0].text
    assert "step 19" in entries[1].text
    final = entries[-1].text
    assert "a1" in final and "done" in final and "$0.42" in final and "17 turns" in final
    assert_paced(entries, SLACK_BUDGET)
    assert ch.waits == {"a1": 0.0}


async def test_b_burst_shares_one_summary(open_channel) -> None:
    async with open_channel(budget=SLACK_BUDGET) as ch:
        for i in range(30):
            await anyio.sleep_until(i * 0.06)
            ch.notifier.handle(AgentSpawned(f"b{i:02}", "w1"))
        await anyio.sleep_until(30.0)
        for crashed in ("b07", "b19"):
            ch.notifier.handle(AgentFinished(crashed, "w1", outcome=Outcome.CRASHED, turns=3))
        rest = [f"b{i:02}" for i in range(30) if i not in (7, 19)]
        for n, name in enumerate(rest):
            await anyio.sleep_until(31.0 + n * 3.0)  # the last at 112 s
            ch.notifier.handle(AgentFinished(name, "w1", outcome=Outcome.DONE, cost=0.1))
        await ch.until_idle()
        entries = ch.entries()
    posts = [e for e in entries if e.op == "post"]
    assert len(posts) == 3
    summary = posts[0]
    assert summary.t == 2.0 and "30 agents" in summary.text and "30 running" in summary.text
    failures = posts[1:]
    assert [p.t for p in failures] == [30.0, 30.0]
    assert sorted(re.search(r"(b\d\d)", p.text).group(1) for p in failures) == ["b07", "b19"]
    assert all("crashed" in p.text for p in failures)
    summary_writes = _texts_of(entries, summary.message_id)
    final = summary_writes[-1].text
    assert "28 done" in final and "0 running" in final and "2 failed" in final
    assert summary_writes[-1].t <= 114.0
    assert_paced(entries, SLACK_BUDGET)  # includes: summary edits at least 2 s apart
    assert len(ch.waits) == 30


async def test_c_rate_limited_pause_collapses_work(open_channel) -> None:
    async with open_channel(budget=DISCORD_BUDGET) as ch:
        names = ["a1", "a2", "a3", "a4"]
        for name in names:
            ch.notifier.handle(AgentSpawned(name, "w1"))
        await anyio.sleep_until(10.0)
        ch.provider.script_fault("fleet", RateLimited(retry_after=5.0))
        ch.notifier.handle(StatusChanged("a1", "w1", status="s0"))
        rng = random.Random(3)
        latest: dict[str, str] = {"a1": "s0"}
        for n in range(1, 11):
            await anyio.sleep_until(10.0 + n * 0.4)
            name = rng.choice(names)
            if name == "a2":
                name = "a3"
            latest[name] = f"s{n}"
            ch.notifier.handle(StatusChanged(name, "w1", status=f"s{n}"))
        ch.notifier.handle(AgentFinished("a2", "w1", outcome=Outcome.FAILED, cost=1.5, turns=9))
        await ch.until_idle()
        entries = ch.entries()
    pause = [e for e in entries if e.op == "error"]
    assert [(e.t, e.error) for e in pause] == [(10.0, "RateLimited")]
    after = [e for e in entries if e.t > 10.0]
    assert after[0].t == 15.0 and "a2" in after[0].text and "failed" in after[0].text
    rest = after[1:]
    assert all(e.op == "edit" for e in rest)
    edited = [re.search(r"(a\d)", e.text).group(1) for e in rest]
    assert sorted(edited) == sorted(latest)  # exactly one edit for each other changed agent
    for e in rest:
        name = re.search(r"(a\d)", e.text).group(1)
        assert f"running: {latest[name]}" in e.text
    assert_paced(entries, DISCORD_BUDGET)


async def test_d_teams_budget_holds_over_an_hour(open_channel) -> None:
    rng = random.Random(11)
    names = [f"t{i:02}" for i in range(20)]
    changes = sorted((rng.uniform(60.0, 3500.0), rng.choice(names)) for _ in range(3000))
    async with open_channel(budget=TEAMS_BUDGET) as ch:
        for i, name in enumerate(names):
            await anyio.sleep_until(i * 3.0)
            ch.notifier.handle(AgentSpawned(name, "w1"))
        for n, (t, name) in enumerate(changes):
            await anyio.sleep_until(t)
            ch.notifier.handle(StatusChanged(name, "w1", status=f"change {n}"))
        for i, name in enumerate(names):
            await anyio.sleep_until(3550.0 + i)
            outcome = Outcome.DONE if i % 4 else Outcome.KILLED
            ch.notifier.handle(AgentFinished(name, "w1", outcome=outcome, cost=2.0, turns=i))
        await ch.until_idle(limit=7200.0)
        entries = ch.entries()
    times = [e.t for e in entries]
    assert max_in_window(times, 1.0) <= 7
    assert max_in_window(times, 3600.0) <= 1800
    assert max_in_window(times, 3600.0) >= 1700  # the cap binds: this is a real test of it
    assert_paced(entries, TEAMS_BUDGET)
    for i, name in enumerate(names):
        last = [e for e in entries if f" {name} [" in e.text][-1]
        turns = "" if i == 0 else ", 1 turn" if i == 1 else f", {i} turns"
        assert f"{'done' if i % 4 else 'killed'}: cost $2.00{turns}" in last.text
    assert sorted(ch.waits) == sorted(names)


async def test_e_deleted_message_reposts_once(open_channel) -> None:
    async with open_channel() as ch:
        ch.notifier.handle(AgentSpawned("a1", "w1"))
        await anyio.sleep_until(10.0)
        ch.provider.script_fault("fleet", NotFound("message deleted"))
        ch.notifier.handle(StatusChanged("a1", "w1", status="one"))
        await anyio.sleep_until(30.0)
        quiet = [e for e in ch.entries() if e.t > 10.0]
        ch.notifier.handle(StatusChanged("a1", "w1", status="two"))
        await anyio.sleep_until(31.0)
        ch.notifier.handle(StatusChanged("a1", "w1", status="three"))
        await ch.until_idle()
        entries = ch.entries()
    assert quiet == []  # nothing between the failed edit and the next update
    first = entries[0]
    assert (first.t, first.op) == (2.0, "post")
    assert (entries[1].t, entries[1].op, entries[1].error) == (10.0, "error", "NotFound")
    later = entries[2:]
    reposts = [e for e in later if e.op == "post"]
    assert len(reposts) == 1 and reposts[0].t == 30.0 and "two" in reposts[0].text
    assert reposts[0].message_id != first.message_id
    assert [(e.op, e.message_id) for e in later[1:]] == [("edit", reposts[0].message_id)]
    assert "three" in later[-1].text and later[-1].t == 32.0
    assert_paced(entries, SLACK_BUDGET)


async def test_f_bot_removed_waits_for_the_recheck(open_channel) -> None:
    async with open_channel() as ch:
        ch.notifier.handle(AgentSpawned("a1", "w1"))
        await anyio.sleep_until(10.0)
        ch.provider.script_fault("fleet", Forbidden("bot removed from channel"))
        ch.notifier.handle(StatusChanged("a1", "w1", status="one"))
        for n in range(50):
            await anyio.sleep_until(11.0 + n * 5)
            ch.notifier.handle(StatusChanged("a1", "w1", status=f"update {n}"))
        await ch.until_idle()
        entries = ch.entries()
    assert [(e.t, e.op) for e in entries[:2]] == [(2.0, "post"), (10.0, "error")]
    assert entries[1].error == "Forbidden"
    after = entries[2:]
    assert after and min(e.t for e in after) >= 310.0
    assert after[0].t == 310.0 and "update 49" in after[0].text
    assert len(after) == 1
