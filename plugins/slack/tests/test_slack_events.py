"""Inbound: the Events API route, its signature checks, and which events become messages."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from bridge_slack import SlackEvents, SlackProvider, SlackSettings
from bridge_slack.testing.fake_slack import event_callback, message_event, signed_headers

from bridge_core.provider import HttpRequest, HttpResponse, InboundMessage

pytestmark = pytest.mark.anyio

CHANNEL = "C0GENERAL"


class Sink:
    def __init__(self) -> None:
        self.messages: list[InboundMessage] = []
        self.fail = False

    async def __call__(self, message: InboundMessage) -> None:
        if self.fail:
            raise RuntimeError("store is down")
        self.messages.append(message)


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def settings(slack_settings: dict[str, Any]) -> SlackSettings:
    return SlackSettings.model_validate({**slack_settings, "bot_user_id": "U0BRIDGE"})


@pytest.fixture
async def provider(settings: SlackSettings) -> AsyncIterator[SlackProvider]:
    async with SlackProvider(settings, profile="ops") as provider:
        yield provider


@pytest.fixture
def sink() -> Sink:
    return Sink()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def events(
    provider: SlackProvider, settings: SlackSettings, sink: Sink, clock: Clock
) -> SlackEvents:
    return SlackEvents(provider, sink, settings=settings, profile="ops", clock=clock)


def request(body: bytes, headers: dict[str, str]) -> HttpRequest:
    return HttpRequest(method="POST", path="/slack/events", headers=headers, body=body)


def signed(secret: str, body: bytes, **kwargs: Any) -> HttpRequest:
    return request(body, signed_headers(secret, body, **kwargs))


def data(response: HttpResponse) -> Any:
    return json.loads(response.body)


async def test_routes_are_served_only_with_a_signing_secret(
    provider: SlackProvider, slack_settings: dict[str, Any], sink: Sink
) -> None:
    (route,) = provider.http_routes(sink)
    assert (route.method, route.path) == ("POST", "/slack/events")
    unsigned = {k: v for k, v in slack_settings.items() if k != "signing_secret"}
    assert SlackProvider(SlackSettings.model_validate(unsigned)).http_routes(sink) == ()


async def test_a_signed_message_reaches_the_sink(
    events: SlackEvents, sink: Sink, signing_secret: str
) -> None:
    body = event_callback(
        message_event(
            channel=CHANNEL, text="deploy?", ts="1700000001.000200", thread_ts="1700000000.000100"
        ),
        event_id="Ev01",
    )
    response = await events.handle(signed(signing_secret, body))
    assert response.status == 200
    (message,) = sink.messages
    assert message.message_id == f"{CHANNEL}:1700000001.000200"
    assert (message.channel, message.author, message.text) == (CHANNEL, "U0PERSON", "deploy?")
    assert message.thread == "1700000000.000100"
    assert message.at == pytest.approx(1700000001.0002)
    assert (message.platform, message.profile, message.author_is_bot) == ("slack", "ops", False)
    assert message.extra["event_id"] == "Ev01"


@pytest.mark.parametrize("field", ["type", "subtype"])
async def test_a_list_where_a_type_belongs_is_ignored_not_a_500(
    events: SlackEvents, sink: Sink, signing_secret: str, field: str
) -> None:
    # Slack signed it: a 500 would make it a poison event Slack sends again and again.
    event = message_event(channel=CHANNEL, text="odd", ts="1700000001.000200")
    event[field] = ["message"]
    response = await events.handle(signed(signing_secret, event_callback(event)))
    assert response.status == 200
    assert sink.messages == []


async def test_url_verification_echoes_the_challenge(
    events: SlackEvents, sink: Sink, signing_secret: str
) -> None:
    body = json.dumps({"type": "url_verification", "challenge": "3eZbrw1aBm2rZgRNFdxV"}).encode()
    response = await events.handle(signed(signing_secret, body))
    assert (response.status, data(response)) == (200, {"challenge": "3eZbrw1aBm2rZgRNFdxV"})
    assert sink.messages == []


async def test_a_wrong_signature_is_refused(events: SlackEvents, sink: Sink) -> None:
    body = event_callback(message_event(channel=CHANNEL, text="forged"))
    response = await events.handle(signed("not-the-signing-secret", body))
    assert response.status == 401
    tampered = signed_headers("anything", body)
    response = await events.handle(request(body + b" ", tampered))
    assert response.status == 401
    response = await events.handle(request(body, {"Content-Type": "application/json"}))
    assert response.status == 401
    assert sink.messages == []


async def test_an_expired_signature_is_refused(
    events: SlackEvents, sink: Sink, clock: Clock, signing_secret: str
) -> None:
    body = event_callback(message_event(channel=CHANNEL, text="old"))
    response = await events.handle(signed(signing_secret, body, timestamp=clock.now - 301))
    assert response.status == 401
    response = await events.handle(signed(signing_secret, body, timestamp=clock.now - 290))
    assert response.status == 200
    assert len(sink.messages) == 1


async def test_a_replay_carries_the_same_id_and_dies_after_five_minutes(
    events: SlackEvents, sink: Sink, clock: Clock, signing_secret: str
) -> None:
    body = event_callback(message_event(channel=CHANNEL, text="once", ts="1700000002.000300"))
    captured = signed(signing_secret, body, timestamp=clock.now)
    assert (await events.handle(captured)).status == 200
    assert (await events.handle(captured)).status == 200  # inside the window: dedup's job
    assert [m.message_id for m in sink.messages] == [f"{CHANNEL}:1700000002.000300"] * 2
    clock.now += 301
    assert (await events.handle(captured)).status == 401
    assert len(sink.messages) == 2


async def test_slack_retries_are_acknowledged_with_the_same_id(
    events: SlackEvents, sink: Sink, signing_secret: str
) -> None:
    body = event_callback(message_event(channel=CHANNEL, text="hi", ts="1700000003.000400"))
    first = await events.handle(signed(signing_secret, body))
    retry = await events.handle(signed(signing_secret, body, retry_num=1))
    assert (first.status, retry.status) == (200, 200)
    assert [m.message_id for m in sink.messages] == [f"{CHANNEL}:1700000003.000400"] * 2
    assert [m.extra["retry_num"] for m in sink.messages] == [0, 1]


async def test_an_app_mention_and_its_message_share_an_id(
    events: SlackEvents, sink: Sink, signing_secret: str
) -> None:
    ts = "1700000004.000500"
    for kind in ("message", "app_mention"):
        event = message_event(channel=CHANNEL, text="<@U0BRIDGE> hi", ts=ts, type=kind)
        await events.handle(signed(signing_secret, event_callback(event, event_id=f"Ev{kind}")))
    assert [m.message_id for m in sink.messages] == [f"{CHANNEL}:{ts}"] * 2


@pytest.mark.parametrize(
    "extra",
    [
        {"bot_id": "B0OTHER"},
        {"subtype": "bot_message", "bot_id": "B0OTHER"},
        {"subtype": "bot_message"},
        {"user": "U0BRIDGE"},  # the bridge itself
        {"bot_profile": {"id": "B0BRIDGE"}},
        {"subtype": "message_changed"},
        {"subtype": "message_deleted"},
        {"subtype": "channel_join"},
    ],
    ids=lambda e: "-".join(f"{k}={v}" for k, v in e.items() if not isinstance(v, dict)) or "prof",
)
async def test_bot_and_system_messages_never_become_messages(
    events: SlackEvents, sink: Sink, signing_secret: str, extra: dict[str, Any]
) -> None:
    event = message_event(channel=CHANNEL, text="beep", **extra)
    response = await events.handle(signed(signing_secret, event_callback(event)))
    assert response.status == 200
    assert sink.messages == []


async def test_thread_broadcasts_and_file_shares_are_user_messages(
    events: SlackEvents, sink: Sink, signing_secret: str
) -> None:
    for n, subtype in enumerate(("thread_broadcast", "file_share")):
        event = message_event(channel=CHANNEL, text="x", ts=f"17.{n}", subtype=subtype)
        await events.handle(signed(signing_secret, event_callback(event)))
    assert len(sink.messages) == 2


async def test_the_bridges_own_user_learned_from_auth_test_is_skipped(
    slack_settings: dict[str, Any], sink: Sink, signing_secret: str
) -> None:
    settings = SlackSettings.model_validate(slack_settings)
    provider = SlackProvider(settings)
    async with provider:
        await provider.identity()
    events = SlackEvents(provider, sink, settings=settings, profile="slack")
    event = message_event(channel=CHANNEL, text="echo of my own post", user="U0BRIDGE")
    await events.handle(signed(signing_secret, event_callback(event)))
    assert sink.messages == []


async def test_a_failing_sink_makes_slack_retry(
    events: SlackEvents, sink: Sink, signing_secret: str, caplog: pytest.LogCaptureFixture
) -> None:
    sink.fail = True
    body = event_callback(message_event(channel=CHANNEL, text="hi"))
    response = await events.handle(signed(signing_secret, body))
    assert response.status == 500
    assert "Slack will retry" in caplog.text
    assert signing_secret not in caplog.text


async def test_a_body_that_is_not_an_event_is_refused_without_retry(
    events: SlackEvents, signing_secret: str
) -> None:
    response = await events.handle(signed(signing_secret, b"not json"))
    assert response.status == 400
    assert response.headers["X-Slack-No-Retry"] == "1"
    other = await events.handle(signed(signing_secret, json.dumps({"type": "app_rate"}).encode()))
    assert other.status == 200


# --------------------------------------------------------------------------- headers and text
# Slack never sends these; answered with a short reason, never a 500 and a traceback.


@pytest.mark.parametrize(
    ("headers", "words"),
    [
        ({"X-Slack-Request-Timestamp": "abc"}, "Timestamp"),
        ({"X-Slack-Request-Timestamp": "1531420618.0"}, "Timestamp"),
        ({"X-Slack-Request-Timestamp": "\uff11\uff17"}, "Timestamp"),  # fullwidth: int() takes them
        ({"X-Slack-Request-Timestamp": "9" * 5000}, "Timestamp"),
        ({"X-Slack-Request-Timestamp": " 17"}, "Timestamp"),
        ({"X-Slack-Request-Timestamp": ""}, "Timestamp"),
        ({"X-Slack-Signature": "v0=é"}, "Signature"),
    ],
)
async def test_headers_slack_never_sends_are_a_400_with_a_reason(
    events: SlackEvents,
    sink: Sink,
    signing_secret: str,
    headers: dict[str, str],
    words: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    body = event_callback(message_event(channel=CHANNEL, text="hi"))
    sent = {**signed_headers(signing_secret, body), **headers}
    response = await events.handle(request(body, sent))
    assert response.status == 400
    assert words in data(response)["error"]
    assert response.headers["X-Slack-No-Retry"] == "1"
    assert "Traceback" not in caplog.text
    assert sink.messages == []


@pytest.mark.parametrize("retry", ["\u00b2", "1.0", "-1", "one", "\u0661"])
async def test_a_retry_count_that_is_not_a_whole_number_is_a_400(
    events: SlackEvents, sink: Sink, signing_secret: str, retry: str
) -> None:
    body = event_callback(message_event(channel=CHANNEL, text="hi"))
    sent = {**signed_headers(signing_secret, body), "X-Slack-Retry-Num": retry}
    response = await events.handle(request(body, sent))
    assert response.status == 400
    assert "Retry-Num" in data(response)["error"]
    assert sink.messages == []


@pytest.mark.parametrize("body", [b"\xff\xfe{}", b'{"a": "\xc3"}'])
async def test_a_body_that_is_not_utf8_is_a_400(
    events: SlackEvents, sink: Sink, signing_secret: str, body: bytes
) -> None:
    headers = signed_headers(signing_secret, b"")  # the body cannot be signed as text anyway
    response = await events.handle(request(body, headers))
    assert response.status == 400
    assert "UTF-8" in data(response)["error"]


async def test_nesting_too_deep_to_read_is_a_400(events: SlackEvents, signing_secret: str) -> None:
    body = b"[" * 100_000 + b"]" * 100_000
    response = await events.handle(signed(signing_secret, body))
    assert response.status == 400


@pytest.mark.parametrize("bad", ["x\ud800", "\udfff", "\udc00\ud800", "a\0b"])
async def test_a_signed_event_with_text_that_cannot_be_carried_is_taken_made_valid(
    events: SlackEvents,
    sink: Sink,
    signing_secret: str,
    bad: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    event = message_event(channel=CHANNEL, text=f"hi {bad}", ts="1700000009.000100", user=bad)
    body = event_callback(event)  # json.dumps writes \ud800 as an escape, as Slack would
    response = await events.handle(signed(signing_secret, body))
    assert response.status == 200
    (message,) = sink.messages
    for value in (message.text, message.author):
        value.encode("utf-8")  # carried
        assert "\0" not in value and "\ufffd" in value
    assert "U+FFFD" in caplog.text
