"""Outbound through the real AsyncWebClient against FakeSlack: what goes over the wire, and how
every Slack answer reads in the core's taxonomy."""

from __future__ import annotations

from typing import Any

import pytest
from bridge_slack import ERROR_CODES, MAX_LENGTH, SlackProvider, SlackSettings, provider_type
from bridge_slack.errors import map_error
from bridge_slack.testing.fake_slack import FakeSlack
from pydantic import ValidationError

from bridge_core.hookspecs import ProviderContext
from bridge_core.provider import (
    Forbidden,
    MessageRef,
    MessageRejected,
    NotFound,
    ProviderError,
    RateLimited,
    TransportError,
    Unreachable,
)
from bridge_core.testing import Reply

pytestmark = pytest.mark.anyio


@pytest.fixture
def provider(slack_settings: dict[str, Any]) -> SlackProvider:
    return SlackProvider(SlackSettings.model_validate(slack_settings), profile="ops")


async def test_post_sends_json_with_the_bearer_token(
    provider: SlackProvider, fake_slack: FakeSlack
) -> None:
    async with provider:
        ref = await provider.post("C0GENERAL", "hello &amp; welcome")
    request = fake_slack.last("chat.postMessage")
    assert request.method == "POST"
    assert request.header("Authorization") == f"Bearer {fake_slack.token}"
    assert request.content_type == "application/json"
    assert request.charset == "utf-8"
    assert request.json == {
        "channel": "C0GENERAL",
        "text": "hello &amp; welcome",
        "link_names": False,
        "unfurl_links": False,
        "unfurl_media": False,
    }
    assert ref == MessageRef(channel="C0GENERAL", message_id=ref.message_id)
    assert fake_slack.message("C0GENERAL", ref.message_id).text == "hello &amp; welcome"


async def test_post_in_a_thread_sends_thread_ts(
    provider: SlackProvider, fake_slack: FakeSlack
) -> None:
    async with provider:
        root = await provider.post("C0GENERAL", "root")
        reply = await provider.post("C0GENERAL", "reply", thread=root.message_id)
    assert fake_slack.last("chat.postMessage").json["thread_ts"] == root.message_id
    assert reply.thread == root.message_id
    assert fake_slack.message("C0GENERAL", reply.message_id).thread_ts == root.message_id


async def test_edit_updates_the_message_in_place(
    provider: SlackProvider, fake_slack: FakeSlack
) -> None:
    async with provider:
        ref = await provider.post("C0GENERAL", "v1")
        assert await provider.edit(ref, "v2") == ref
    sent = fake_slack.last("chat.update").json
    assert (sent["channel"], sent["ts"], sent["text"]) == ("C0GENERAL", ref.message_id, "v2")
    message = fake_slack.message("C0GENERAL", ref.message_id)
    assert (message.text, message.edits) == ("v2", ["v1"])


@pytest.mark.parametrize("code", sorted(ERROR_CODES))
async def test_every_documented_error_maps_onto_the_taxonomy(
    provider: SlackProvider, fake_slack: FakeSlack, code: str
) -> None:
    expected, _ = ERROR_CODES[code]
    fake_slack.script("chat.update", FakeSlack.error(code))
    async with provider:
        ref = await provider.post("C0GENERAL", "x")
        with pytest.raises(expected) as caught:
            await provider.edit(ref, "y")
    assert type(caught.value) is expected
    assert code in str(caught.value)
    assert "chat.update" in str(caught.value) and "C0GENERAL" in str(caught.value)


@pytest.mark.parametrize("code", ["no_text", "msg_too_long", "invalid_arguments", "invalid_blocks"])
@pytest.mark.parametrize("operation", ["post", "edit"])
async def test_a_refused_message_is_rejected_and_the_channel_carries_on(
    provider: SlackProvider, fake_slack: FakeSlack, code: str, operation: str
) -> None:
    async with provider:
        ref = await provider.post("C0GENERAL", "before")
        method = "chat.postMessage" if operation == "post" else "chat.update"
        fake_slack.script(method, FakeSlack.error(code))
        with pytest.raises(ProviderError) as caught:
            if operation == "post":
                await provider.post("C0GENERAL", "refused")
            else:
                await provider.edit(ref, "refused")
        assert type(caught.value) is MessageRejected, f"{code} must not give the channel up"
        assert code in str(caught.value)
        await provider.post("C0GENERAL", "after")
    assert fake_slack.texts("C0GENERAL") == ["before", "after"]


@pytest.mark.parametrize(
    "code",
    [
        "not_authed",
        "invalid_auth",
        "account_inactive",
        "token_revoked",
        "token_expired",
    ],
)
def test_a_dead_credential_stays_unreachable(code: str) -> None:
    error = map_error(
        status=200,
        body={"ok": False, "error": code},
        headers=None,
        where="Slack chat.postMessage to channel C1",
    )
    assert type(error) is Unreachable


@pytest.mark.parametrize(
    ("reply", "retry_after"),
    [
        (FakeSlack.rate_limited(7), 7.0),
        (Reply.json({"ok": False, "error": "ratelimited"}, status=429), None),
        (FakeSlack.error("rate_limited"), None),  # the Tier's older spelling, HTTP 200
    ],
)
async def test_rate_limits_surface_at_once_with_their_retry_after(
    provider: SlackProvider, fake_slack: FakeSlack, reply: Reply, retry_after: float | None
) -> None:
    fake_slack.script("chat.postMessage", reply)
    async with provider:
        with pytest.raises(RateLimited) as caught:
            await provider.post("C0GENERAL", "x")
    assert caught.value.retry_after == retry_after
    assert fake_slack.count("chat.postMessage") == 1, "the SDK must not resend on a 429"


@pytest.mark.parametrize(
    "reply",
    [Reply.dropped(), FakeSlack.server_error(500), FakeSlack.server_error(502)],
    ids=["dropped", "500", "502"],
)
async def test_transport_failures_are_never_resent_by_the_sdk(
    provider: SlackProvider, fake_slack: FakeSlack, reply: Reply
) -> None:
    fake_slack.script("chat.postMessage", reply)
    async with provider:
        with pytest.raises(TransportError):
            await provider.post("C0GENERAL", "x")
    assert fake_slack.count("chat.postMessage") == 1, "a resend here is a duplicate the ledger "


async def test_an_unknown_error_code_reads_as_transient_and_names_the_code(
    provider: SlackProvider, fake_slack: FakeSlack
) -> None:
    fake_slack.script("chat.postMessage", FakeSlack.error("brand_new_error"))
    async with provider:
        with pytest.raises(TransportError, match="brand_new_error"):
            await provider.post("C0GENERAL", "x")


async def test_the_fake_platform_state_refuses_like_slack(
    provider: SlackProvider, fake_slack: FakeSlack
) -> None:
    fake_slack.add_channel("C0NOTIN", member=False)
    fake_slack.add_channel("C0OLD", archived=True)
    foreign = fake_slack.add_foreign_message("C0GENERAL", "someone else's")
    async with provider:
        with pytest.raises(Forbidden, match="channel_not_found"):
            await provider.post("C0MISSING", "x")
        with pytest.raises(Forbidden, match="not_in_channel"):
            await provider.post("C0NOTIN", "x")
        with pytest.raises(Forbidden, match="is_archived"):
            await provider.post("C0OLD", "x")
        with pytest.raises(NotFound, match="cant_update_message"):
            await provider.edit(MessageRef("C0GENERAL", foreign), "mine now")
        ref = await provider.post("C0GENERAL", "soon gone")
        fake_slack.delete_message("C0GENERAL", ref.message_id)
        with pytest.raises(NotFound, match="message_not_found"):
            await provider.edit(ref, "edit of a deleted message")


async def test_a_wrong_token_is_unreachable_and_never_echoed(fake_slack: FakeSlack) -> None:
    wrong = "xoxb-not-the-right-token-1234"
    settings = SlackSettings(bot_token=wrong, api_base_url=fake_slack.api_url)  # type: ignore[arg-type]
    async with SlackProvider(settings) as provider:
        with pytest.raises(Unreachable, match=r"invalid_auth.*bot_token") as caught:
            await provider.post("C0GENERAL", "x")
    assert wrong not in str(caught.value) and wrong not in repr(provider)
    assert caught.value.__cause__ is None and caught.value.__context__ is None


async def test_over_long_text_is_refused_before_any_request(
    provider: SlackProvider, fake_slack: FakeSlack
) -> None:
    async with provider:
        await provider.post("C0GENERAL", "a" * MAX_LENGTH)
        with pytest.raises(MessageRejected, match="chunk"):
            await provider.post("C0GENERAL", "a" * (MAX_LENGTH + 1))
        with pytest.raises(MessageRejected, match="chunk"):
            await provider.edit(MessageRef("C0GENERAL", "1.1"), "b" * (MAX_LENGTH + 1))
    assert fake_slack.count() == 1


async def test_probe_reads_conversations_info(
    provider: SlackProvider, fake_slack: FakeSlack
) -> None:
    fake_slack.add_channel("C0NOTIN", member=False)
    fake_slack.add_channel("C0OLD", archived=True)
    async with provider:
        assert await provider.probe("C0GENERAL") is True
        assert await provider.probe("C0OLD") is False
        assert await provider.probe("C0MISSING") is False
        assert await provider.probe("C0NOTIN") is None  # chat:write.public may still allow it
        fake_slack.script("conversations.info", FakeSlack.error("missing_scope"))
        assert await provider.probe("C0GENERAL") is None
        fake_slack.script("conversations.info", FakeSlack.rate_limited(3))
        with pytest.raises(RateLimited):
            await provider.probe("C0GENERAL")
    request = fake_slack.last("conversations.info")
    assert request.method == "GET" and request.query["channel"] == "C0GENERAL"


async def test_a_probe_whose_connection_drops_is_one_request(
    provider: SlackProvider, fake_slack: FakeSlack
) -> None:
    # conversations.info is a GET, which aiohttp would send again by itself on a dropped
    # connection: the provider's session turns that off.
    async with provider:
        await provider.probe("C0GENERAL")  # a kept-alive connection to lose
        fake_slack.script("conversations.info", Reply.dropped())
        with pytest.raises(TransportError):
            await provider.probe("C0GENERAL")
    assert fake_slack.count("conversations.info") == 2


async def test_a_redirect_is_not_followed(provider: SlackProvider, fake_slack: FakeSlack) -> None:
    # aiohttp would send the POST again at a 307's Location: one request, a TransportError.
    location = fake_slack.api_url + "chat.postMessage"
    fake_slack.script("chat.postMessage", Reply(status=307, headers={"Location": location}))
    async with provider:
        with pytest.raises(TransportError, match="HTTP 307"):
            await provider.post("C0GENERAL", "moved")
    assert fake_slack.count("chat.postMessage") == 1


async def test_identity_asks_auth_test_once(provider: SlackProvider, fake_slack: FakeSlack) -> None:
    async with provider:
        assert provider.own_ids() == (None, None)
        assert await provider.identity() == ("U0BRIDGE", "B0BRIDGE")
        assert await provider.identity() == ("U0BRIDGE", "B0BRIDGE")
    assert fake_slack.count("auth.test") == 1
    assert provider.own_ids() == ("U0BRIDGE", "B0BRIDGE")


async def test_the_context_base_url_wins_over_the_settings(fake_slack: FakeSlack) -> None:
    settings = SlackSettings.model_validate(
        {"bot_token": fake_slack.token, "api_base_url": "https://slack.invalid/api"}
    )
    provider = provider_type().factory(
        settings, ProviderContext(profile="p", api_base_url=fake_slack.api_url)
    )
    async with provider:
        await provider.post("C0GENERAL", "via the context URL")
    assert fake_slack.count("chat.postMessage") == 1


async def test_a_closed_provider_reconnects_on_next_use(
    provider: SlackProvider, fake_slack: FakeSlack
) -> None:
    await provider.post("C0GENERAL", "one")
    await provider.aclose()
    await provider.post("C0GENERAL", "two")
    await provider.aclose()
    assert fake_slack.texts("C0GENERAL") == ["one", "two"]


def test_settings_validate_without_echoing_secrets() -> None:
    with pytest.raises(ValidationError, match="xoxb") as caught:
        SlackSettings.model_validate({"bot_token": "sk-live-oops-wrong-key"})
    assert "sk-live-oops" not in str(caught.value)
    with pytest.raises(ValidationError, match="extra"):
        SlackSettings.model_validate({"bot_token": "xoxb-1", "tokn": "x"})
    with pytest.raises(ValidationError, match="http"):
        SlackSettings.model_validate({"bot_token": "xoxb-1", "api_base_url": "slack.com"})
    settings = SlackSettings.model_validate(
        {"bot_token": "xoxb-1", "api_base_url": "https://slack-gov.com/api"}
    )
    assert settings.api_base_url == "https://slack-gov.com/api/"
    assert "xoxb-1" not in repr(settings)


def test_every_error_class_in_the_table_is_a_provider_error() -> None:
    assert all(issubclass(cls, ProviderError) for cls, _ in ERROR_CODES.values())
    assert {cls for cls, _ in ERROR_CODES.values()} == {
        NotFound,
        Forbidden,
        Unreachable,
        MessageRejected,
        TransportError,
    }


async def test_a_channel_the_bot_cannot_see_is_rechecked_not_given_up(
    provider: SlackProvider, fake_slack: FakeSlack
) -> None:
    # Slack answers channel_not_found for a private channel the bot was removed from: Forbidden
    # (the sender re-checks with probe, the ledger keeps the reply), so a re-invite brings the
    # channel back instead of every later reply being abandoned.
    async with provider:
        with pytest.raises(Forbidden, match="channel_not_found"):
            await provider.post("C0PRIVATE", "while removed")
        assert await provider.probe("C0PRIVATE") is False
        fake_slack.add_channel("C0PRIVATE")  # the bot is invited back
        assert await provider.probe("C0PRIVATE") is True
        await provider.post("C0PRIVATE", "after the re-invite")
    assert fake_slack.texts("C0PRIVATE") == ["after the re-invite"]
