"""Messages written while inbound was down longer than Slack retries are read back when it
starts again: two ``receive`` runs sharing one key-value store, against FakeSlack's
``conversations.history``, over Socket Mode and over the Events API."""

from __future__ import annotations

import itertools
import json
import logging
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
from bridge_slack import SlackProvider, SlackSettings
from bridge_slack.backfill import NAMESPACE
from bridge_slack.testing.fake_slack import (
    FakeSlack,
    event_callback,
    signed_headers,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge_core import InboundMessage, Unreachable
from bridge_core.ledger.kv import MemoryKeyValueStore
from bridge_core.provider import HttpRequest, HttpRoute

sys.path.insert(0, str(Path(__file__).parent))  # the shared kit, by name (its docstring)
from slack_backfill_kit import (
    CHANNEL,
    PROFILE,
    SECOND,
    USER,
    Sink,
    first_run,
    in_thread,
    push,
    running,
    say,
    socket_settings,
)

pytestmark = pytest.mark.anyio

ELSEWHERE = "C0ELSEWHERE"  # a channel no run heard from before


@pytest.fixture
def fake(fake_slack: FakeSlack) -> FakeSlack:
    for channel in (SECOND, ELSEWHERE):
        fake_slack.add_channel(channel)
    return fake_slack


def history_reads(fake: FakeSlack) -> list[dict[str, str]]:
    return [r.query for r in fake.requests_to("conversations.history")]


async def stored(kv: MemoryKeyValueStore) -> dict[str, str]:
    raw = await kv.get(NAMESPACE, PROFILE)
    assert raw is not None
    return dict(json.loads(raw)["channels"])


# ---------------------------------------------------------------------- the gap, in order


async def test_a_message_sent_while_down_is_delivered_once_before_the_channels_live_ones(
    fake: FakeSlack,
) -> None:
    kv = MemoryKeyValueStore()
    await first_run(fake, kv, CHANNEL)
    say(fake, CHANNEL, "while down")  # Slack gave up on its event: only history has it
    say(fake, CHANNEL, "a bot while down", user="U0OTHERBOT", bot_id="B0OTHER")
    say(fake, CHANNEL, "", user="U0NEWCOMER", subtype="channel_join")

    sink = Sink()
    fake.history_hold = threading.Event()
    try:
        async with running(fake, socket_settings(fake), kv, sink):
            await in_thread(lambda: fake.wait_for(1, "conversations.history"))
            live = push(fake, say(fake, CHANNEL, "live after the restart"))
            push(fake, say(fake, ELSEWHERE, "elsewhere"))
            await sink.count(1)
            assert [m.text for m in sink.messages] == ["elsewhere"]  # the channel's live waits
            assert await in_thread(lambda: fake.socket_acked(live))  # held, yet acknowledged
            fake.history_hold.set()
            await sink.count(3)
    finally:
        fake.history_hold.set()

    assert sink.texts(CHANNEL) == ["while down", "live after the restart"]
    assert len(sink.messages) == 3  # not the first run's, the bot's or the join
    assert [r["channel"] for r in history_reads(fake)] == [CHANNEL]


async def test_messages_already_delivered_are_not_read_back_again(fake: FakeSlack) -> None:
    kv = MemoryKeyValueStore()
    await first_run(fake, kv, CHANNEL)
    sink = Sink()
    async with running(fake, socket_settings(fake), kv, sink):
        push(fake, say(fake, CHANNEL, "second run, live"))
        await sink.count(1)
    [read] = history_reads(fake)
    seen = [m.ts for m in fake.messages.values() if m.text == "seen live 0"]
    assert read["oldest"] == seen[0]  # from the last one delivered, exclusive

    # The read is held until the live event was taken, so it lists that message: written
    # between an unheld read and its event's arrival, it would come both ways (the core's
    # dedup drops the second; this sink has none).
    sink = Sink()
    fake.history_hold = threading.Event()
    try:
        async with running(fake, socket_settings(fake), kv, sink):
            await in_thread(lambda: fake.wait_for(2, "conversations.history"))
            live = push(fake, say(fake, CHANNEL, "third run, live"))
            assert await in_thread(lambda: fake.socket_acked(live))  # held
            fake.history_hold.set()
            await sink.count(1)
    finally:
        fake.history_hold.set()
    assert [m.text for m in sink.messages] == ["third run, live"]
    last = [m.ts for m in fake.messages.values() if m.text == "second run, live"]
    assert history_reads(fake)[-1]["oldest"] == last[0]


@pytest.mark.parametrize("missed", [999, 1000, 1001])
async def test_a_gap_past_the_cap_warns_only_when_messages_were_left_unread(
    fake: FakeSlack, missed: int, caplog: pytest.LogCaptureFixture
) -> None:
    kv = MemoryKeyValueStore()
    await first_run(fake, kv, CHANNEL)
    for number in range(missed):
        fake.add_foreign_message(CHANNEL, f"missed {number}", user=USER)
    sink = Sink()
    with caplog.at_level(logging.WARNING, logger="bridge_slack"):
        async with running(fake, socket_settings(fake), kv, sink):
            await sink.count(min(missed, 1000))
            push(fake, say(fake, CHANNEL, "live"))
            await sink.until(lambda messages: messages[-1].text == "live")
    texts = sink.texts(CHANNEL)
    assert len(texts) == min(missed, 1000) + 1
    assert texts[0] == f"missed {max(0, missed - 1000)}"  # the newest 1,000, oldest first
    warned = [r for r in caplog.records if "not delivered" in r.getMessage()]
    assert len(warned) == (1 if missed > 1000 else 0)


async def test_a_rate_limited_read_waits_as_told_and_does_not_hammer(fake: FakeSlack) -> None:
    kv = MemoryKeyValueStore()
    await first_run(fake, kv, CHANNEL)
    for number in range(7):
        fake.add_foreign_message(CHANNEL, f"missed {number}", user=USER)
    fake.history_page_max = 3  # as for apps outside the Marketplace: 3 pages
    fake.history_limit = (1, 1.0)  # one read a second; a 429 says Retry-After: 1
    sink = Sink()
    async with running(fake, socket_settings(fake), kv, sink):
        await sink.count(7)
    assert sink.texts(CHANNEL) == [f"missed {n}" for n in range(7)]
    times = fake.history_times
    assert len(times) == 3 + fake.history_rate_limited
    assert fake.history_rate_limited <= 2  # at most one refusal per page after the first
    for (earlier, refused), (later, _) in itertools.pairwise(times):
        if refused:  # never sooner than the Retry-After (1 s) it said
            assert later - earlier >= 0.95


@pytest.mark.parametrize("code", ["channel_not_found", "not_in_channel", "missing_scope"])
async def test_an_unreadable_channel_is_forgotten_and_the_others_are_read_back(
    fake: FakeSlack, code: str, caplog: pytest.LogCaptureFixture
) -> None:
    kv = MemoryKeyValueStore()
    await first_run(fake, kv, CHANNEL, SECOND)
    say(fake, CHANNEL, "lost while down")
    say(fake, SECOND, "while down")
    fake.history_refusals[CHANNEL] = code
    sink = Sink()
    with caplog.at_level(logging.WARNING, logger="bridge_slack"):
        async with running(fake, socket_settings(fake), kv, sink):
            await sink.until(lambda messages: "while down" in [m.text for m in messages])
            push(fake, say(fake, CHANNEL, "live, unreadable channel"))
            await sink.until(lambda messages: len(messages) == 2)
    assert sink.texts(SECOND) == ["while down"]
    assert sink.texts(CHANNEL) == ["live, unreadable channel"]  # its lane opened
    assert any(code in r.getMessage() and CHANNEL in r.getMessage() for r in caplog.records)
    assert not any(r.levelno >= logging.ERROR for r in caplog.records)
    # forgotten, then remembered again by the live message after it
    positions = await stored(kv)
    live = [m.message_id for m in sink.messages if m.channel == CHANNEL]
    assert f"{CHANNEL}:{positions[CHANNEL]}" == live[0]


async def test_a_refused_token_while_reading_back_ends_inbound_as_on_the_socket(
    fake: FakeSlack,
) -> None:
    kv = MemoryKeyValueStore()
    await first_run(fake, kv, CHANNEL)
    fake.script("conversations.history", fake.error("token_revoked"))
    provider = SlackProvider(socket_settings(fake), profile=PROFILE, kv=kv)
    try:
        with anyio.fail_after(10), pytest.raises(Unreachable, match="token_revoked"):
            await provider.receive(Sink())
    finally:
        await provider.aclose()
    assert fake.count("conversations.history") == 1


async def test_a_corrupt_stored_value_does_not_stop_inbound_and_is_replaced(
    fake: FakeSlack, caplog: pytest.LogCaptureFixture
) -> None:
    kv = MemoryKeyValueStore()
    await kv.put(NAMESPACE, PROFILE, b'{"v": 1, "channels": [["C0GENERAL", "not a ts"]]}')
    sink = Sink()
    with caplog.at_level(logging.WARNING, logger="bridge_slack"):
        async with running(fake, socket_settings(fake), kv, sink):
            push(fake, say(fake, CHANNEL, "live"))
            await sink.count(1)
    assert any("not readable" in r.getMessage() for r in caplog.records)
    assert history_reads(fake) == []
    assert list(await stored(kv)) == [CHANNEL]


@pytest.mark.parametrize("how", ["no store", "backfill off"])
async def test_without_a_store_or_with_backfill_off_inbound_is_as_before(
    fake: FakeSlack, how: str
) -> None:
    kv = MemoryKeyValueStore()
    await first_run(fake, kv, CHANNEL)
    say(fake, CHANNEL, "while down")
    settings = socket_settings(fake, backfill=how != "backfill off")
    sink = Sink()
    async with running(fake, settings, None if how == "no store" else kv, sink):
        push(fake, say(fake, CHANNEL, "live"))
        await sink.count(1)
        push(fake, say(fake, CHANNEL, "live again"))
        await sink.count(2)
    assert [m.text for m in sink.messages] == ["live", "live again"]
    assert history_reads(fake) == []
    positions = await stored(kv)
    assert positions[CHANNEL] == next(
        m.ts for m in fake.messages.values() if m.text == "seen live 0"
    )


# ---------------------------------------------------------------------- the Events API


def signed(secret: str, event: dict[str, Any]) -> HttpRequest:
    body = event_callback(event, event_id=f"Ev{event['ts']}")
    return HttpRequest(
        method="POST", path="/slack/events", headers=signed_headers(secret, body), body=body
    )


async def test_over_http_the_gap_is_read_back_before_the_channels_live_events(
    fake: FakeSlack, signing_secret: str
) -> None:
    settings = SlackSettings(
        bot_token=fake.token,
        signing_secret=signing_secret,
        api_base_url=fake.api_url,
        bot_user_id=fake.bot_user_id,
        timeout=2.0,
    )
    kv = MemoryKeyValueStore()

    async def run(steps: Callable[[HttpRoute, Sink], Any]) -> Sink:
        provider = SlackProvider(settings, profile=PROFILE, kv=kv)
        sink = Sink()
        [route] = provider.http_routes(sink)  # served before receive starts, as the gateway does
        try:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(provider.receive, sink)
                await steps(route, sink)
                tasks.cancel_scope.cancel()
        finally:
            await provider.aclose()
        return sink

    async def first(route: HttpRoute, sink: Sink) -> None:
        response = await route.handler(signed(signing_secret, say(fake, CHANNEL, "seen live")))
        assert response.status == 200
        await sink.count(1)

    await run(first)
    say(fake, CHANNEL, "while down")
    fake.history_hold = threading.Event()

    async def second(route: HttpRoute, sink: Sink) -> None:
        await in_thread(lambda: fake.wait_for(1, "conversations.history"))
        with anyio.fail_after(5):  # answered at once, not held past Slack's 3 s
            live = await route.handler(signed(signing_secret, say(fake, CHANNEL, "live")))
        assert live.status == 200
        assert sink.messages == []
        fake.history_hold.set()
        await sink.count(2)

    try:
        sink = await run(second)
    finally:
        fake.history_hold.set()
    assert [m.text for m in sink.messages] == ["while down", "live"]


# ---------------------------------------------------------------------- history as live


def test_history_and_live_give_the_same_message_for_the_same_message(fake: FakeSlack) -> None:
    from bridge_slack.events import from_history, to_inbound
    from bridge_slack.testing.fake_history import history_json

    own = (fake.bot_user_id, fake.bot_id)
    parent = fake.add_foreign_message(CHANNEL, "a parent", user=USER)
    shapes: list[tuple[str, dict[str, Any]]] = [
        ("plain", {}),
        ("broadcast reply", {"thread_ts": parent, "subtype": "thread_broadcast"}),
        ("file", {"subtype": "file_share"}),
        ("/me", {"subtype": "me_message"}),
        ("a bot", {"subtype": "bot_message", "bot_id": "B0OTHER"}),
        ("a join", {"subtype": "channel_join"}),
        ("an edit", {"subtype": "message_changed"}),
        ("tombstone", {"subtype": "tombstone"}),
        ("from an app", {"bot_profile": {"name": "app"}}),
    ]
    readable = 0
    for text, fields in shapes:
        fields = dict(fields)
        thread_ts = fields.pop("thread_ts", None)
        ts = fake.add_foreign_message(CHANNEL, text, user=USER, thread_ts=thread_ts, **fields)
        listed = history_json(fake, fake.message(CHANNEL, ts))
        event = {**listed, "channel": CHANNEL, "event_ts": ts, "channel_type": "channel"}
        live = to_inbound(
            json.loads(event_callback(event, team_id=fake.team_id)), profile=PROFILE, own_ids=own
        )
        read = from_history(listed, channel=CHANNEL, profile=PROFILE, own_ids=own)
        if live is None:
            assert read is None, text
            continue
        readable += 1
        assert read is not None, text
        assert {**read.extra, "event_id": None} == {**live.extra, "event_id": None}
        assert (read.message_id, read.channel, read.author, read.text, read.at, read.thread) == (
            live.message_id,
            live.channel,
            live.author,
            live.text,
            live.at,
            live.thread,
        )
    assert readable == 4
    own_post = fake.add_foreign_message(CHANNEL, "ours", user=fake.bot_user_id)
    listed = history_json(fake, fake.message(CHANNEL, own_post))
    assert from_history(listed, channel=CHANNEL, profile=PROFILE, own_ids=own) is None


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
_KEYS = st.sampled_from(["type", "user", "text", "ts", "thread_ts", "subtype", "bot_id", "team"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    listed=_JSON | st.dictionaries(_KEYS, _JSON | st.text(), max_size=8),
    channel=st.text(),
)
def test_any_listed_json_gives_a_message_or_none_never_an_error(listed: Any, channel: str) -> None:
    from bridge_slack.events import from_history

    read = from_history(listed, channel=channel, profile=PROFILE, own_ids=(None, None))
    assert read is None or isinstance(read, InboundMessage)
