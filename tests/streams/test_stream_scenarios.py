"""Streamed replies on virtual time, exact: what one or many streams cost a channel, and how a
stream meets the seed's live-message faults. Assertions read only the console transcript,
checked by the independent budget and spacing checker."""

from __future__ import annotations

import anyio
import pytest
from bridge_slack import SLACK_BUDGET

from bridge_core.ledger import State
from bridge_core.provider import NotFound, RateLimited
from bridge_core.sending import Priority
from bridge_core.streams import CURSOR
from bridge_core.testing.budget import assert_paced

from .conftest import CHANNEL, evenly

pytestmark = pytest.mark.anyio


def _writes(entries, message_id=None):
    return [
        e for e in entries if e.op != "error" and (message_id is None or e.message_id == message_id)
    ]


async def test_one_agent_1000_deltas_over_30s_on_slack(open_stream_channel) -> None:
    deltas = evenly(1000, over=30.0)
    full = "".join(text for _, text in deltas)
    async with open_stream_channel(budget=SLACK_BUDGET) as ch:
        row = await ch.stream("a", deltas)
        await ch.until_idle()
        entries = ch.entries()
    posts = [e for e in entries if e.op == "post"]
    edits = [e for e in entries if e.op == "edit"]
    assert row.state is State.DELIVERED
    assert len(posts) == 1 and len(edits) <= 16, (len(posts), len(edits))
    assert posts[0].t == 0.0  # the first delta is at 0: the first send slot
    assert posts[0].text == "00 " + CURSOR
    assert all(e.message_id == posts[0].message_id for e in edits)
    final = edits[-1]
    assert final.text == full and final.t <= 30.0 + SLACK_BUDGET.edit_spacing
    assert all(e.text.endswith(CURSOR) for e in _writes(entries)[:-1])  # nothing looks final early
    assert [e.op for e in entries].count("error") == 0
    assert_paced(entries, SLACK_BUDGET)
    print(f"1000 deltas / 30 s: {len(posts)} post, {len(edits)} edits, final at t={final.t}")


async def test_ten_agents_at_once_stay_within_budget_and_every_final_lands(
    open_stream_channel,
) -> None:
    names = [f"r{i}" for i in range(10)]
    streams = {name: evenly(200, over=30.0, start=0.1 * i) for i, name in enumerate(names)}
    rows = {}
    most_queued = 0
    async with open_stream_channel(budget=SLACK_BUDGET) as ch:

        async def one(name: str) -> None:
            rows[name] = await ch.stream(name, streams[name])

        async def watch() -> None:
            nonlocal most_queued
            while True:
                most_queued = max(most_queued, ch.sender.queued)
                await anyio.sleep(0.05)

        async with anyio.create_task_group() as group:
            group.start_soon(watch)
            async with anyio.create_task_group() as replies:
                for name in names:
                    replies.start_soon(one, name)
            group.cancel_scope.cancel()
        await ch.until_idle()
        entries = ch.entries()
    # 2,000 deltas, yet the sender never held more than one write per reply in progress
    assert 0 < most_queued <= len(names)
    assert_paced(entries, SLACK_BUDGET)
    posts = [e for e in entries if e.op == "post"]
    assert len(posts) == 10  # one message per reply
    for name in names:
        row = rows[name]
        assert row.state is State.DELIVERED
        (ref,) = row.delivered
        (partial,) = row.partials
        assert ref.message_id == partial.message_id  # the final is the partial's last edit
        last = _writes(entries, ref.message_id)[-1]
        assert last.text == "".join(text for _, text in streams[name])
    first_posts = sorted(p.t for p in posts)
    assert first_posts[:3] == [0.0, 0.1, 0.2]  # Slack's burst of 3, then 1 a second
    finals = [_writes(entries, rows[n].delivered[0].message_id)[-1].t for n in names]
    print(f"10 agents: {len(entries)} sends, finals from t={min(finals)} to t={max(finals)}")


async def test_rate_limited_mid_stream_pauses_then_shows_the_latest_text(
    open_stream_channel,
) -> None:
    deltas = evenly(300, over=20.0)
    async with open_stream_channel(budget=SLACK_BUDGET) as ch:

        async def fault() -> None:
            await anyio.sleep_until(5.0)
            ch.provider.script_fault(CHANNEL, RateLimited("slow down", retry_after=7.0))

        async with anyio.create_task_group() as group:
            group.start_soon(fault)
            row = await ch.stream("a", deltas)
        await ch.until_idle()
        entries = ch.entries()
    errors = [e for e in entries if e.op == "error"]
    assert [(e.t, e.error) for e in errors] == [(6.0, "RateLimited")]
    after = [e for e in _writes(entries) if e.t > 6.0]
    assert after[0].t == 13.0  # nothing during the 7 s pause, then one edit
    # the edit after the pause shows the text of that moment, not the stale one refused
    shown = after[0].text.removesuffix(CURSOR)
    fed_by_13 = "".join(text for t, text in deltas if t <= 13.0)
    assert shown == fed_by_13
    assert row.state is State.DELIVERED
    assert _writes(entries)[-1].text == "".join(text for _, text in deltas)
    assert len([e for e in entries if e.op == "post"]) == 1
    assert_paced(entries, SLACK_BUDGET)


async def test_not_found_mid_stream_reposts_once_and_the_final_lands_there(
    open_stream_channel,
) -> None:
    deltas = evenly(300, over=20.0)
    async with open_stream_channel(budget=SLACK_BUDGET) as ch:

        async def fault() -> None:
            await anyio.sleep_until(5.0)
            ch.provider.script_fault(CHANNEL, NotFound("message deleted"))

        async with anyio.create_task_group() as group:
            group.start_soon(fault)
            row = await ch.stream("a", deltas)
        await ch.until_idle()
        entries = ch.entries()
    posts = [e for e in entries if e.op == "post"]
    assert [e.op for e in entries if e.op == "error"] == ["error"]
    assert len(posts) == 2  # the first message, then exactly one new one after NotFound
    (partial,) = row.partials
    assert partial.message_id == posts[1].message_id
    assert row.delivered[0].message_id == posts[1].message_id
    assert _writes(entries)[-1].text == "".join(text for _, text in deltas)
    assert_paced(entries, SLACK_BUDGET)


async def test_a_post_answered_not_found_stops_the_partials_and_the_final_posts(
    open_stream_channel,
) -> None:
    # NotFound on a post: no channel or thread to post in, not a deleted message. Each update
    # posted again, for ever; now the partials stop, as for a refusal, and the ledger's final
    # is the one message.
    deltas = evenly(100, over=10.0)
    async with open_stream_channel(budget=SLACK_BUDGET) as ch:
        ch.provider.script_fault(CHANNEL, NotFound("thread_not_found"))
        row = await ch.stream("a", deltas)
        await ch.until_idle()
        entries = ch.entries()
    posts = [e for e in entries if e.op == "post"]
    assert [e.error for e in entries if e.op == "error"] == ["NotFound"]
    assert [p.text for p in posts] == ["".join(text for _, text in deltas)]
    assert [e.op for e in _writes(entries)] == ["post"]  # no partial before the final
    assert row.state is State.DELIVERED and row.delivered[0].message_id == posts[0].message_id


async def test_not_found_on_the_final_edit_posts_the_final(open_stream_channel) -> None:
    deltas = evenly(50, over=5.0)
    async with open_stream_channel(budget=SLACK_BUDGET) as ch:
        stream = ch.stream("a", deltas)

        async def fault() -> None:
            # the last intermediate edit is at 4 s; the final edit comes at 6 s
            await anyio.sleep_until(5.5)
            ch.provider.script_fault(CHANNEL, NotFound("message deleted"))

        async with anyio.create_task_group() as group:
            group.start_soon(fault)
            row = await stream
        entries = ch.entries()
    posts = [e for e in entries if e.op == "post"]
    assert len(posts) == 2 and posts[1].text == "".join(text for _, text in deltas)
    assert row.state is State.DELIVERED and row.delivered[0].message_id == posts[1].message_id


async def test_a_stream_crossing_the_maximum_rolls_over_at_a_safe_point(
    open_stream_channel,
) -> None:
    deltas = evenly(900, over=30.0)  # 2,700 characters over a 1,000-character maximum
    full = "".join(text for _, text in deltas)
    async with open_stream_channel(budget=SLACK_BUDGET, max_length=1000) as ch:
        row = await ch.stream("a", deltas)
        await ch.until_idle()
        entries = ch.entries()
    posts = [e for e in entries if e.op == "post"]
    # parts leave room for the recovery marker: 3 of about 900 characters and the rest, which
    # begins with the last deltas at 30 s: the stream posts it, or (when the final takes the
    # slot first) the final does
    assert len(posts) == 4 and len(row.chunks) == 4 and len(row.partials) in (3, 4)
    assert row.delivered[: len(row.partials)] == row.partials
    assert [r.message_id for r in row.delivered] == [p.message_id for p in posts]
    finals = [_writes(entries, p.message_id)[-1].text for p in posts]
    assert "".join(finals) == full  # split on spaces, nothing lost or doubled
    assert all(len(text) <= 1000 for text in finals)
    assert all(text.endswith(" ") for text in finals[:-1])  # a safe split point
    assert all(len(e.text) <= 1000 for e in _writes(entries))
    assert_paced(entries, SLACK_BUDGET)


async def test_a_channel_without_edits_gets_only_the_final_post(open_stream_channel) -> None:
    deltas = evenly(300, over=20.0)
    async with open_stream_channel(budget=SLACK_BUDGET, edit=False) as ch:
        row = await ch.stream("a", deltas)
        entries = ch.entries()
    assert [(e.op, e.t) for e in entries] == [("post", 20.0)]
    assert entries[0].text == "".join(text for _, text in deltas)
    assert row.state is State.DELIVERED and row.partials == ()


async def test_a_short_answer_finished_before_its_first_slot_is_one_post(
    open_stream_channel,
) -> None:
    async with open_stream_channel(budget=SLACK_BUDGET) as ch:
        # the channel is busy for the next seconds: terminal posts spend the burst and more
        for i in range(5):
            ch.sender.submit(("other", i), text=f"other {i}", priority=Priority.TERMINAL)
        row = await ch.stream("a", [(0.0, "Hello"), (0.1, ", world")])
        await ch.until_idle()
        entries = ch.entries()
    mine = [e for e in entries if "Hello" in e.text]
    assert [(e.op, e.text) for e in mine] == [("post", "Hello, world")]
    assert row.partials == ()


async def test_forbidden_mid_stream_stops_until_the_recheck_then_the_final_lands(
    open_stream_channel,
) -> None:
    deltas = evenly(300, over=20.0)
    async with open_stream_channel(budget=SLACK_BUDGET) as ch:

        async def fault() -> None:
            await anyio.sleep_until(5.0)
            ch.provider.block(CHANNEL)  # the bot loses access: sends raise Forbidden
            await anyio.sleep_until(100.0)
            ch.provider.unblock(CHANNEL)

        async with anyio.create_task_group() as group:
            group.start_soon(fault)
            await ch.stream("a", deltas)
        await anyio.sleep_until(400.0)  # the re-check, then the ledger's attempt
        entries = ch.entries()
        row = await ch.store.get("ob-a")
    errors = [e for e in entries if e.op == "error"]
    assert [(e.t, e.error) for e in errors] == [(6.0, "Forbidden")]
    after = [e for e in entries if e.t > 6.0]
    # nothing until the re-check 300 s later (the probe says yes at 306 s); the final, refused
    # before its send, is the ledger's: its next attempt (every 30 s) after the re-check
    assert 306.0 <= after[0].t <= 306.0 + 30.0
    assert [e.op for e in after] == ["edit"]  # the final, as the last edit of the message
    assert row is not None and row.state is State.DELIVERED
    assert _writes(entries)[-1].text == "".join(text for _, text in deltas)
    assert_paced(entries, SLACK_BUDGET)


async def test_a_channel_saturated_by_notifications_still_shows_the_final_first(
    open_stream_channel,
) -> None:
    deltas = evenly(100, over=10.0)
    async with open_stream_channel(budget=SLACK_BUDGET) as ch:

        async def flood() -> None:
            await anyio.sleep_until(3.0)
            for i in range(50):  # fifty new live messages: fifty seconds of Slack's budget
                ch.sender.submit(("live", i), text=f"agent {i} running", priority=Priority.NEW)

        async with anyio.create_task_group() as group:
            group.start_soon(flood)
            row = await ch.stream("a", deltas)
        await ch.until_idle()
        entries = ch.entries()
    final = next(e for e in entries if e.message_id == row.delivered[0].message_id and e.t >= 10.0)
    notifications = [e for e in entries if e.text.startswith("agent ")]
    assert final.text == "".join(text for _, text in deltas)
    assert final.t <= 10.0 + SLACK_BUDGET.edit_spacing + 1.0  # one slot after it may go
    assert len(notifications) == 50 and notifications[-1].t > 50.0  # they were still queued
    assert_paced(entries, SLACK_BUDGET)
