"""The rest of issue 3's checklist, one rule per test, read through the console transcript."""

from __future__ import annotations

import re

import anyio
import pytest
from bridge_discord import DISCORD_BUDGET
from bridge_slack import SLACK_BUDGET

from bridge_core.events import (
    AgentFinished,
    AgentGone,
    AgentSpawned,
    Outcome,
    Output,
    StatusChanged,
    ToolStarted,
    UnknownEvent,
)
from bridge_core.notify import Notifier, NotifyConfig
from bridge_core.provider import Forbidden, LengthUnit, NotFound
from bridge_core.testing.budget import assert_paced

pytestmark = pytest.mark.anyio


def done(name: str, ws: str = "w1", outcome: Outcome = Outcome.DONE) -> AgentFinished:
    return AgentFinished(name, ws, outcome=outcome, cost=0.25, turns=4)


async def test_without_edits_one_post_at_spawn_and_one_terminal_post(open_channel) -> None:
    async with open_channel(edit=False) as ch:
        ch.notifier.handle(AgentSpawned("a1", "w1"))
        for n in range(10):
            await anyio.sleep_until(3.0 + n)
            ch.notifier.handle(StatusChanged("a1", "w1", status=f"s{n}"))
        await anyio.sleep_until(20.0)
        ch.notifier.handle(done("a1"))
        await ch.until_idle()
        entries = ch.entries()
    assert [(e.t, e.op) for e in entries] == [(2.0, "post"), (20.0, "post")]
    assert "running" in entries[0].text and "done" in entries[1].text


async def test_without_edits_summary_members_get_one_terminal_post_each(open_channel) -> None:
    async with open_channel(edit=False, budget=DISCORD_BUDGET) as ch:
        for n in range(6):
            ch.notifier.handle(AgentSpawned(f"a{n}", "w1"))
        await anyio.sleep_until(5.0)
        ch.notifier.handle(AgentSpawned("late", "w1"))  # joins the summary: no post of its own
        await anyio.sleep_until(30.0)
        for n in range(6):
            ch.notifier.handle(done(f"a{n}"))
        ch.notifier.handle(done("late", outcome=Outcome.KILLED))
        await ch.until_idle()
        entries = ch.entries()
    assert all(e.op == "post" for e in entries)
    assert entries[0].t == 2.0 and "6 agents" in entries[0].text
    finals = entries[1:]
    assert len(finals) == 7 and all(e.t >= 30.0 for e in finals)
    assert sorted(re.search(r" (\w+) \[", e.text).group(1) for e in finals) == sorted(
        [*(f"a{n}" for n in range(6)), "late"]
    )


async def test_a_finish_during_the_hold_is_one_post(open_channel) -> None:
    async with open_channel() as ch:
        ch.notifier.handle(AgentSpawned("quick", "w1"))
        await anyio.sleep_until(1.0)
        ch.notifier.handle(done("quick"))
        await ch.until_idle()
        entries = ch.entries()
    assert [(e.t, e.op) for e in entries] == [(2.0, "post")]
    assert "done" in entries[0].text and "4 turns" in entries[0].text


async def test_four_spawns_post_alone_five_share_a_summary(open_channel) -> None:
    async with open_channel(budget=DISCORD_BUDGET) as ch:
        for n in range(4):
            ch.notifier.handle(AgentSpawned(f"x{n}", "small"))
        for n in range(5):
            ch.notifier.handle(AgentSpawned(f"y{n}", "big"))
        await ch.until_idle()
        entries = ch.entries()
    posts = [e.text for e in entries if e.op == "post"]
    assert sum("[small] running" in t for t in posts) == 4
    assert sum("agents in [big]" in t for t in posts) == 1 and len(posts) == 5


async def test_threshold_and_hold_are_configurable(open_channel) -> None:
    config = NotifyConfig(hold=0.5, threshold=3, window=4.0)
    async with open_channel(config=config, budget=DISCORD_BUDGET) as ch:
        for n in range(3):
            ch.notifier.handle(AgentSpawned(f"a{n}", "w1"))
        await anyio.sleep_until(4.4)  # within 4 s of the summary's latest member (0 s)? no
        ch.notifier.handle(AgentSpawned("late", "w1"))
        await ch.until_idle()
        entries = ch.entries()
    assert entries[0].t == 0.5 and "3 agents" in entries[0].text
    assert entries[1].t == 4.9 and "late" in entries[1].text and "running" in entries[1].text


async def test_spawn_within_window_of_latest_member_joins(open_channel) -> None:
    async with open_channel(budget=DISCORD_BUDGET) as ch:
        for n in range(5):
            ch.notifier.handle(AgentSpawned(f"a{n}", "w1"))
        for n, t in enumerate((9.0, 18.0, 27.0)):  # each within 10 s of the previous member
            await anyio.sleep_until(t)
            ch.notifier.handle(AgentSpawned(f"j{n}", "w1"))
        await anyio.sleep_until(40.0)
        ch.notifier.handle(AgentSpawned("alone", "w1"))  # 13 s after the latest member
        await ch.until_idle()
        entries = ch.entries()
    posts = [e for e in entries if e.op == "post"]
    assert len(posts) == 2 and "alone" in posts[1].text and posts[1].t == 42.0
    summary = [e for e in entries if e.message_id == posts[0].message_id]
    assert "8 agents" in summary[-1].text and "8 running" in summary[-1].text


async def test_killed_stay_in_the_summary_failures_get_their_own_post(open_channel) -> None:
    async with open_channel(budget=DISCORD_BUDGET) as ch:
        for n in range(6):
            ch.notifier.handle(AgentSpawned(f"a{n}", "w1"))
        await anyio.sleep_until(10.0)
        ch.notifier.handle(done("a0", outcome=Outcome.KILLED))
        ch.notifier.handle(done("a1", outcome=Outcome.FAILED))
        ch.notifier.handle(AgentGone("a2", "w1", reason="host lost"))
        for n in range(3, 6):
            ch.notifier.handle(done(f"a{n}"))
        await ch.until_idle()
        entries = ch.entries()
    posts = [e for e in entries if e.op == "post"]
    assert len(posts) == 2 and "a1" in posts[1].text and "failed" in posts[1].text
    final = [e for e in entries if e.message_id == posts[0].message_id][-1].text
    assert "3 done, 0 running, 1 failed, 1 killed, 1 gone" in final


async def test_filters_choose_kinds_and_workspaces(open_channel) -> None:
    config = NotifyConfig(workspaces=frozenset({"mine"}))
    async with open_channel(config=config) as ch:
        ch.notifier.handle(AgentSpawned("other", "theirs"))
        ch.notifier.handle(AgentSpawned("a1", "mine"))
        ch.notifier.handle(Output("a1", "mine", text="chunk"))
        ch.notifier.handle(ToolStarted("a1", "mine", tool="grep"))
        ch.notifier.handle(UnknownEvent("a1", "mine", unknown_kind="Future"))
        await ch.until_idle()
        assert ch.notifier.statistics().filtered == 4
        entries = ch.entries()
    assert [e.op for e in entries] == ["post"] and "a1" in entries[0].text
    only_spawns = NotifyConfig(kinds=frozenset({"AgentSpawned"}))
    async with open_channel(config=only_spawns) as ch:
        ch.notifier.handle(AgentSpawned("b1", "w"))
        await anyio.sleep(5)
        ch.notifier.handle(StatusChanged("b1", "w", status="ignored"))
        await ch.until_idle()
        assert [e.op for e in ch.entries()] == ["post"]


async def test_agent_text_never_pings(open_channel) -> None:
    async with open_channel() as ch:
        ch.notifier.handle(AgentSpawned("@everyone", "<!channel>", title="hi @here <@U123>"))
        await anyio.sleep(3)
        ch.notifier.handle(StatusChanged("@everyone", "<!channel>", status="@channel <!here>"))
        await ch.until_idle()
        texts = [e.text for e in ch.entries()]
    assert len(texts) == 2
    for text in texts:
        for token in ("@everyone", "@here", "@channel", "<!channel>", "<!here>", "<@U123>"):
            assert token not in text
        assert "everyone" in text  # still names its agent, defused


async def test_live_messages_fit_the_provider_maximum(open_channel) -> None:
    async with open_channel(max_length=120, length_unit=LengthUnit.UTF16) as ch:
        ch.notifier.handle(AgentSpawned("long", "w1", title="\U0001f600" * 300))
        await ch.until_idle()
        entries = ch.entries()
    assert entries[0].op == "post"
    assert len(entries[0].text.encode("utf-16-le")) // 2 <= 120


async def test_after_an_outage_terminal_states_first_then_current_states(open_channel) -> None:
    names = [f"a{n}" for n in range(6)]
    async with open_channel(budget=SLACK_BUDGET) as ch:
        for n, name in enumerate(names):
            await anyio.sleep_until(n * 3.0)
            ch.notifier.handle(AgentSpawned(name, "w1"))
        await anyio.sleep_until(30.0)
        ch.provider.block("fleet")
        ch.notifier.handle(StatusChanged("a0", "w1", status="trigger"))
        for step in range(200):
            await anyio.sleep_until(31.0 + step)
            ch.notifier.handle(StatusChanged(names[step % 6], "w1", status=f"step {step}"))
        ch.notifier.handle(done("a1"))
        ch.notifier.handle(done("a4", outcome=Outcome.CRASHED))
        ch.provider.unblock("fleet")
        await ch.until_idle()
        entries = ch.entries()
    back = [e for e in entries if e.t > 30.0 and e.op != "error"]
    assert back[0].t == 330.0
    assert {re.search(r" (a\d) ", e.text).group(1) for e in back[:2]} == {"a1", "a4"}
    assert all(("done" in e.text or "crashed" in e.text) for e in back[:2])
    rest = back[2:]
    assert sorted(re.search(r" (a\d) ", e.text).group(1) for e in rest) == [
        "a0",
        "a2",
        "a3",
        "a5",
    ]
    for e in rest:
        name = re.search(r" (a\d) ", e.text).group(1)
        last_step = max(s for s in range(200) if names[s % 6] == name)
        assert f"step {last_step}" in e.text
    assert_paced(entries, SLACK_BUDGET)


async def test_a_restarted_notifier_gives_a_running_agent_a_fresh_message(open_channel) -> None:
    async with open_channel() as ch:
        ch.notifier.handle(AgentSpawned("a1", "w1"))
        await anyio.sleep_until(10.0)
        # A new notifier (the process restarted) on the same channel: refs were not kept.
        fresh = Notifier("fleet", ch.sender, capabilities=ch.provider.capabilities)
        async with anyio.create_task_group() as group:
            group.start_soon(fresh.run)
            fresh.handle(StatusChanged("a1", "w1", status="after restart"))
            await anyio.sleep_until(20.0)
            group.cancel_scope.cancel()
        entries = ch.entries()
    assert [e.op for e in entries] == ["post", "post"]
    assert entries[0].message_id != entries[1].message_id
    assert "after restart" in entries[1].text


async def test_late_events_after_the_end_open_nothing(open_channel) -> None:
    async with open_channel() as ch:
        ch.notifier.handle(AgentSpawned("a1", "w1"))
        await anyio.sleep_until(5.0)
        ch.notifier.handle(done("a1"))
        ch.notifier.handle(AgentGone("a1", "w1", reason="cleanup"))
        await anyio.sleep_until(8.0)
        ch.notifier.handle(StatusChanged("a1", "w1", status="stale"))
        await ch.until_idle()
        entries = ch.entries()
        assert ch.notifier.live_agents == 0
    assert [(e.t, e.op) for e in entries] == [(2.0, "post"), (5.0, "edit")]


async def test_pending_work_is_bounded_by_live_agents(open_channel) -> None:
    async with open_channel(budget=SLACK_BUDGET) as ch:
        for n in range(40):
            await anyio.sleep_until(n * 2.5)
            ch.notifier.handle(AgentSpawned(f"a{n}", "w1"))
        for step in range(20_000):
            ch.notifier.handle(StatusChanged(f"a{step % 40}", "w1", status=f"s{step}"))
            assert ch.sender.queued <= 40
        await ch.until_idle()
        entries = ch.entries()
    assert len(entries) <= 40 + 40  # one post each, then at most one collapsed edit each


async def test_forbidden_then_a_terminal_is_not_lost(open_channel) -> None:
    async with open_channel() as ch:
        ch.notifier.handle(AgentSpawned("a1", "w1"))
        await anyio.sleep_until(10.0)
        ch.provider.script_fault("fleet", Forbidden("kicked"))
        ch.notifier.handle(StatusChanged("a1", "w1", status="x"))
        await anyio.sleep_until(20.0)
        ch.notifier.handle(done("a1"))
        await ch.until_idle()
        entries = ch.entries()
        assert ch.waits == {"a1": 290.0}
    assert entries[-1].t == 310.0 and "done" in entries[-1].text


async def test_a_deleted_message_with_a_final_state_is_reposted_at_once(open_channel) -> None:
    async with open_channel() as ch:
        ch.notifier.handle(AgentSpawned("a1", "w1"))
        await anyio.sleep_until(10.0)
        ch.provider.script_fault("fleet", NotFound("deleted"))
        ch.notifier.handle(done("a1"))
        await ch.until_idle()
        entries = ch.entries()
    assert [(e.t, e.op) for e in entries] == [(2.0, "post"), (10.0, "error"), (10.0, "post")]
    assert "done" in entries[-1].text and entries[-1].message_id != entries[0].message_id


async def test_a_deleted_summary_comes_back_once_with_the_counts(open_channel) -> None:
    async with open_channel(budget=DISCORD_BUDGET) as ch:
        for n in range(5):
            ch.notifier.handle(AgentSpawned(f"a{n}", "w1"))
        await anyio.sleep_until(10.0)
        ch.provider.script_fault("fleet", NotFound("deleted"))
        ch.notifier.handle(done("a0"))
        await anyio.sleep_until(20.0)
        for n in range(1, 5):
            ch.notifier.handle(done(f"a{n}"))
        await ch.until_idle()
        entries = ch.entries()
    posts = [e for e in entries if e.op == "post"]
    assert [p.t for p in posts] == [2.0, 10.0]  # the final state of a0 is not left waiting
    assert "1 done, 4 running" in posts[1].text
    final = [e for e in entries if e.message_id == posts[1].message_id][-1]
    assert "5 done, 0 running, 0 failed" in final.text and final.t == 20.0


async def test_a_life_that_ends_inside_the_hold_survives_a_respawn(open_channel) -> None:
    async with open_channel() as ch:
        ch.notifier.handle(AgentSpawned("a1", "w1"))
        await anyio.sleep_until(0.5)
        ch.notifier.handle(done("a1", outcome=Outcome.FAILED))
        await anyio.sleep_until(1.0)
        ch.notifier.handle(AgentSpawned("a1", "w1"))
        await ch.until_idle()
        entries = ch.entries()
    assert [(e.t, e.op) for e in entries] == [(1.0, "post"), (3.0, "post")]
    assert "failed" in entries[0].text and "running" in entries[1].text


async def test_replies_and_notifications_share_one_budget(open_channel) -> None:
    from bridge_core.sending import Post, Priority

    async with open_channel(budget=SLACK_BUDGET) as ch:
        for n in range(4):
            ch.notifier.handle(AgentSpawned(f"a{n}", "w1"))
        await anyio.sleep_until(10.0)
        for step in range(200):
            ch.notifier.handle(StatusChanged(f"a{step % 4}", "w1", status=f"s{step}"))
        # A reply to a person, the ledger's way: it waits for the outcome.
        ref = await ch.sender.send(Post("reply to Ana"), priority=Priority.TERMINAL)
        replied_at = anyio.current_time()
        await ch.until_idle()
        entries = ch.entries()
    assert ch.provider.text_of(ref.message_id) == "reply to Ana"
    reply = [e for e in entries if e.text == "reply to Ana"]
    assert len(reply) == 1 and reply[0].t == replied_at
    # At 10 s the bucket holds 3 sends: the reply goes first, ahead of the 4 queued edits.
    at_ten = [e for e in entries if e.t == 10.0]
    assert replied_at == 10.0 and len(at_ten) == 3 and at_ten[0].text == "reply to Ana"
    assert all(e.op == "edit" for e in at_ten[1:])
    assert_paced(entries, SLACK_BUDGET)


async def test_ending_the_holds_at_stop_decides_each_group_now(open_channel) -> None:
    """At a graceful stop no spawn can join a hold any more, so waiting it out only spends the
    grace period: ``end_holds`` settles every group as it stands, and a later spawn (an agent
    still finishing its turn) is not held either."""
    async with open_channel(budget=DISCORD_BUDGET) as ch:
        for n in range(5):
            ch.notifier.handle(AgentSpawned(f"b{n}", "big"))
        ch.notifier.handle(AgentSpawned("lone", "small"))
        await anyio.sleep_until(0.5)
        ch.notifier.end_holds()
        await anyio.sleep_until(0.75)
        ch.notifier.handle(AgentSpawned("after", "other"))
        await ch.until_idle()
        entries = ch.entries()
    posts = [(e.t, e.text) for e in entries if e.op == "post"]
    assert len(posts) == 3, posts
    assert all(t < 2.0 for t, _ in posts), posts  # the hold is 2 s: none was waited out
    assert sum("5 agents in [big]" in text for _, text in posts) == 1
    assert sum("lone" in text and "running" in text for _, text in posts) == 1
    assert sum("after" in text and "running" in text for _, text in posts) == 1


async def test_holds_end_on_time_however_many_wakes_come_between(open_channel) -> None:
    """The timer loop keeps one deadline across wakes (ADR 0177): spawns that wake it while an
    earlier hold runs neither delay that hold nor end their own early, and a finished name is
    still forgotten on schedule."""
    config = NotifyConfig(hold=2.0, forget_after=5.0)
    async with open_channel(budget=DISCORD_BUDGET, config=config) as ch:
        ch.notifier.handle(AgentSpawned("first", "w1"))
        for n in range(3):  # each wakes the loop while the first hold runs
            await anyio.sleep_until(0.5 + 0.5 * n)
            ch.notifier.handle(AgentSpawned(f"later{n}", f"w{n + 2}"))
        await anyio.sleep_until(3.0)
        ch.notifier.handle(done("first"))
        await anyio.sleep_until(9.0)
        forgotten = "first" not in ch.notifier._finished  # pruned 5 s after its end, by 10.0
        await anyio.sleep_until(10.5)
        pruned = "first" not in ch.notifier._finished
        await ch.until_idle()
        entries = ch.entries()
    posts = {e.text.split()[1]: e.t for e in entries if e.op == "post"}
    assert posts == {"first": 2.0, "later0": 2.5, "later1": 3.0, "later2": 3.5}, posts
    assert not forgotten and pruned
