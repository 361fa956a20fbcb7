"""The Bot Framework messaging endpoint: JWT validation with keys served by FakeTeams (offline),
activities to InboundMessage, and conversation references kept for proactive sends."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

import pytest
from botbuilder.schema import Activity
from bridge_teams import (
    InvalidToken,
    OpenIdKeys,
    StaticKeys,
    TeamsProvider,
    TeamsSettings,
    TokenValidator,
    inbound_from_activity,
)
from bridge_teams.testing.fake_teams import FakeTeams
from cryptography.hazmat.primitives.asymmetric import rsa

from bridge_core import HttpRequest, HttpResponse, InboundMessage

pytestmark = pytest.mark.anyio


class Sink:
    def __init__(self) -> None:
        self.messages: list[InboundMessage] = []

    async def __call__(self, message: InboundMessage) -> None:
        self.messages.append(message)


def request(activity: dict[str, Any], token: str | None) -> HttpRequest:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return HttpRequest(
        method="POST",
        path="/api/teams/messages",
        headers=headers,
        body=json.dumps(activity).encode("utf-8"),
    )


async def deliver(provider: TeamsProvider, sink: Sink, req: HttpRequest) -> HttpResponse:
    (route,) = provider.http_routes(sink)
    assert (route.method, route.path) == ("POST", "/api/teams/messages")
    return await route.handler(req)


async def test_valid_token_delivers_the_message(
    fake: FakeTeams, provider: TeamsProvider, channel: str
) -> None:
    sink = Sink()
    root = fake.message_activity(channel, "a root")
    activity = fake.message_activity(
        f"{channel};messageid={root['id']}", "<at>Bridge</at> please summarise"
    )
    activity["entities"] = [
        {
            "type": "mention",
            "mentioned": {"id": fake.bot_id, "name": "Bridge"},
            "text": "<at>Bridge</at>",
        }
    ]
    response = await deliver(provider, sink, request(activity, fake.channel_token()))
    assert response.status == 200
    (message,) = sink.messages
    assert message.message_id == activity["id"]
    assert (message.channel, message.thread) == (channel, root["id"])
    assert message.text == "please summarise"
    assert message.author == "aad-user-1" and not message.author_is_bot
    assert message.platform == "teams" and message.profile == "test"
    assert abs(message.at - time.time()) < 60
    assert fake.count("jwks") == 1  # keys fetched from the (local) metadata, then cached
    await deliver(provider, sink, request(activity, fake.channel_token()))
    assert fake.count("jwks") == 1


@pytest.mark.parametrize(
    "forge",
    [
        "missing",
        "garbage",
        "expired",
        "other_app",
        "other_issuer",
        "foreign_key",
        "other_service_url",
        "no_service_url_claim",
        "activity_without_service_url",
    ],
)
async def test_bad_tokens_are_refused(
    fake: FakeTeams,
    provider: TeamsProvider,
    channel: str,
    forge: str,
    foreign_key: rsa.RSAPrivateKey,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    activity = fake.message_activity(channel, "let me in")
    tokens: dict[str, str | None] = {
        "missing": None,
        "garbage": "not.a.jwt",
        # Older than the five minutes of clock skew the Bot Framework allows.
        "expired": fake.channel_token(issued_at=time.time() - 3600 - 400, lifetime=3600),
        "other_app": fake.channel_token(audience="another-app-id"),
        "other_issuer": fake.channel_token(issuer="https://evil.example"),
        "foreign_key": fake.channel_token(key=foreign_key),
        "other_service_url": fake.channel_token(service_url="https://evil.example/"),
        # The Bot Connector's rule: the claim must be there, and match the activity's serviceUrl.
        "no_service_url_claim": fake.channel_token(without=["serviceurl"]),
        "activity_without_service_url": fake.channel_token(),
    }
    if forge == "activity_without_service_url":
        del activity["serviceUrl"]
    sink = Sink()
    response = await deliver(provider, sink, request(activity, tokens[forge]))
    assert response.status == 401
    assert sink.messages == []
    token = tokens[forge]
    if token:
        assert token not in caplog.text


async def test_replayed_request_keeps_its_message_id(
    fake: FakeTeams, provider: TeamsProvider, channel: str
) -> None:
    # A replay carries a valid token for an hour; the core's dedup drops it by message id, so the
    # provider must hand over the same id both times.
    sink = Sink()
    req = request(fake.message_activity(channel, "once"), fake.channel_token())
    assert (await deliver(provider, sink, req)).status == 200
    assert (await deliver(provider, sink, req)).status == 200
    assert [m.message_id for m in sink.messages] == [sink.messages[0].message_id] * 2
    # Replaying the token onto an activity that redirects our answers elsewhere is refused.
    redirected = fake.message_activity(channel, "answer over there")
    redirected["serviceUrl"] = "https://evil.example/"
    response = await deliver(provider, sink, request(redirected, fake.channel_token()))
    assert response.status == 401


async def test_bot_messages_are_not_user_turns(
    fake: FakeTeams, provider: TeamsProvider, channel: str
) -> None:
    sink = Sink()
    ours = fake.message_activity(channel, "our own", bot_author=True)
    other = fake.message_activity(channel, "another bot", author_id="28:another-bot")
    for activity in (ours, other):
        response = await deliver(provider, sink, request(activity, fake.channel_token()))
        assert response.status == 200
        assert inbound_from_activity(Activity.deserialize(activity), profile="p").author_is_bot  # type: ignore[union-attr]
    assert sink.messages == []


async def test_non_message_activities_only_teach_the_reference(
    fake: FakeTeams,
    make_settings: Callable[..., TeamsSettings],
    channel: str,
    kv: Any,
) -> None:
    settings = make_settings(fake, service_url=None)
    update = fake.message_activity(channel, "", activity_type="conversationUpdate")
    sink = Sink()
    async with TeamsProvider(settings, profile="p", kv=kv) as provider:
        response = await deliver(provider, sink, request(update, fake.channel_token()))
        assert response.status == 200 and sink.messages == []
    # After a "restart", with no service_url configured, the stored reference is enough.
    async with TeamsProvider(settings, profile="p", kv=kv) as restarted:
        ref = await restarted.post(channel, "proactive after a restart")
    assert fake.texts(channel) == ["proactive after a restart"]
    assert ref.channel == channel


async def test_local_development_switch_skips_validation_loudly(
    fake: FakeTeams,
    make_settings: Callable[..., TeamsSettings],
    channel: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert TeamsSettings.model_fields["insecure_skip_token_validation"].default is False
    caplog.set_level(logging.WARNING)
    settings = make_settings(fake, insecure_skip_token_validation=True)
    sink = Sink()
    async with TeamsProvider(settings, profile="dev") as provider:
        response = await deliver(
            provider, sink, request(fake.message_activity(channel, "hi"), None)
        )
    assert response.status == 200 and len(sink.messages) == 1
    assert "WITHOUT token validation" in caplog.text


async def test_injected_keys_work_without_any_key_service(
    fake: FakeTeams, make_settings: Callable[..., TeamsSettings], channel: str
) -> None:
    settings = make_settings(fake, openid_metadata_url="http://127.0.0.1:9/unreachable")
    sink = Sink()
    async with TeamsProvider(settings, profile="p", keys=StaticKeys(fake.jwks())) as provider:
        activity = fake.message_activity(channel, "offline")
        response = await deliver(provider, sink, request(activity, fake.channel_token()))
    assert response.status == 200 and len(sink.messages) == 1
    assert fake.count("jwks") == 0


async def test_endorsements_must_name_the_channel(
    fake: FakeTeams, provider: TeamsProvider, channel: str
) -> None:
    fake.endorsements = ["slack"]
    activity = fake.message_activity(channel, "wrong channel endorsement")
    response = await deliver(provider, Sink(), request(activity, fake.channel_token()))
    assert response.status == 401


async def test_not_an_activity_is_a_bad_request(fake: FakeTeams, provider: TeamsProvider) -> None:
    req = HttpRequest(method="POST", path="/api/teams/messages", headers={}, body=b"{not json")
    assert (await deliver(provider, Sink(), req)).status == 400


async def test_rotated_key_is_fetched_once_then_cached(
    fake: FakeTeams, channel: str, foreign_key: rsa.RSAPrivateKey
) -> None:
    clock = [1000.0]
    keys = OpenIdKeys(fake.openid_url, min_refresh=60.0, clock=lambda: clock[0])
    validator = TokenValidator(app_id=fake.app_id, keys=keys)
    service = fake.service_url
    await validator.validate(
        f"Bearer {fake.channel_token()}", channel_id="msteams", service_url=service
    )
    # The channel starts signing with a new key: an unknown kid fetches the keys again, but at
    # most once a minute, so a flood of made-up key ids cannot hammer the key service.
    fake.signing_key, fake.key_id = foreign_key, "fake-key-2"
    clock[0] += 61.0
    await validator.validate(
        f"Bearer {fake.channel_token()}", channel_id="msteams", service_url=service
    )
    assert fake.count("jwks") == 2
    for _ in range(3):
        with pytest.raises(InvalidToken, match="unknown key"):
            await validator.validate(
                f"Bearer {fake.channel_token(kid='made-up')}",
                channel_id="msteams",
                service_url=service,
            )
    assert fake.count("jwks") == 2


async def test_signed_garbage_is_a_bad_request_and_unsigned_json_unauthorized(
    fake: FakeTeams, provider: TeamsProvider, channel: str
) -> None:
    garbage = fake.message_activity(channel, "x")
    garbage["timestamp"] = "not a date"
    sink = Sink()
    assert (await deliver(provider, sink, request(garbage, fake.channel_token()))).status == 400
    # The token is checked before the body is deserialised: unsigned JSON never gets that far.
    assert (await deliver(provider, sink, request(garbage, None))).status == 401
    assert sink.messages == []


@pytest.mark.parametrize("bad", ["x\ud800", "\udfff", "\udc00\ud800", "a\0b"])
async def test_a_signed_activity_with_text_that_cannot_be_carried_is_taken_made_valid(
    fake: FakeTeams,
    provider: TeamsProvider,
    channel: str,
    bad: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # refused, the connector would send it again; taken with U+FFFD, it is answered (ADR 0070)
    activity = fake.message_activity(channel, f"hi {bad}", author_aad=f"aad{bad}")
    activity["conversation"]["id"] = f"{channel}{bad}"
    sink = Sink()
    response = await deliver(provider, sink, request(activity, fake.channel_token()))
    assert response.status == 200
    (message,) = sink.messages
    for value in (message.text, message.author, message.channel):
        value.encode("utf-8")
        assert "\0" not in value and "\ufffd" in value
    assert "U+FFFD" in caplog.text


async def test_nesting_too_deep_to_read_is_a_bad_request(provider: TeamsProvider) -> None:
    body = b"[" * 100_000 + b"]" * 100_000
    req = HttpRequest(method="POST", path="/api/teams/messages", headers={}, body=body)
    assert (await deliver(provider, Sink(), req)).status == 400
