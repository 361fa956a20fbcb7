"""The Teams provider through botframework-connector's real ConnectorClient against FakeTeams."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import anyio
import pytest
from bridge_teams import TeamsProvider, TeamsSettings
from bridge_teams.testing.fake_teams import FakeTeams

from bridge_core import (
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


async def test_post_and_edit(fake: FakeTeams, provider: TeamsProvider, channel: str) -> None:
    ref = await provider.post(channel, "hello **team**")
    assert ref == MessageRef(channel=channel, message_id=ref.message_id)
    sent = fake.last("send_activity")
    assert sent.params["conversation_id"] == channel
    assert (
        sent.header(
            "Authorization",
        )
        is not None
    )
    assert (
        sent.header(
            "Authorization",
        ).removeprefix("Bearer ")
        in fake.issued_tokens
    )
    body = sent.json
    assert body["type"] == "message" and body["text"] == "hello **team**"
    assert body["from"]["id"] == fake.bot_id
    assert not body.get("entities"), "no mention entities, ever"
    assert await provider.edit(ref, "hello again") == ref
    update = fake.last("update_activity")
    assert update.method == "PUT" and update.params["activity_id"] == ref.message_id
    assert fake.texts(channel) == ["hello again"]
    assert fake.count("token") == 1, "the connector token is cached"


async def test_reply_chain_is_the_thread(
    fake: FakeTeams, provider: TeamsProvider, channel: str
) -> None:
    root = await provider.post(channel, "root")
    reply = await provider.post(channel, "in the chain", thread=root.message_id)
    assert reply.thread == root.message_id
    sent = fake.last("send_activity")
    assert sent.params["conversation_id"] == f"{channel};messageid={root.message_id}"
    await provider.edit(reply, "edited in the chain")
    assert fake.activity(channel, reply.message_id)["text"] == "edited in the chain"


@pytest.mark.parametrize(
    ("reply", "expected", "match"),
    [
        (FakeTeams.error(503, "ServiceUnavailable"), TransportError, "503"),
        (FakeTeams.error(502, "BadGateway"), TransportError, "502"),
        (FakeTeams.error(412, "PreconditionFailed"), TransportError, "412"),
        (FakeTeams.error(500, "ServiceError"), MessageRejected, "not resent"),
        (FakeTeams.error(403, "BotDisabledByAdmin"), Unreachable, "disabled"),
        (FakeTeams.error(403, "NotEnoughPermissions"), Forbidden, "permission"),
        (FakeTeams.error(413, "MessageSizeTooBig"), MessageRejected, "size"),
        (FakeTeams.error(413, "RequestEntityTooLarge"), MessageRejected, "413"),
        (FakeTeams.error(400, "BadArgument"), MessageRejected, "400"),
        (FakeTeams.error(422, "BadSyntax"), MessageRejected, "422"),
        (FakeTeams.error(405, "MethodNotAllowed"), Unreachable, "405"),
        (Reply.dropped(), TransportError, "network"),
    ],
)
async def test_post_faults_are_mapped_and_never_resent(
    fake: FakeTeams,
    provider: TeamsProvider,
    channel: str,
    reply: Reply,
    expected: type[ProviderError],
    match: str,
) -> None:
    fake.script("send_activity", reply)
    with pytest.raises(expected, match=match) as caught:
        await provider.post(channel, "once")
    assert type(caught.value) is expected
    # The SDK's exception (its response's request holds the token) is never chained.
    assert caught.value.__cause__ is None and caught.value.__context__ is None
    assert fake.count("send_activity") == 1, "msrest must not resend behind the ledger's back"
    assert fake.texts(channel) == []


async def test_edit_500_is_transient(
    fake: FakeTeams, provider: TeamsProvider, channel: str
) -> None:
    ref = await provider.post(channel, "v1")
    fake.script("update_activity", FakeTeams.error(500, "ServiceError"))
    with pytest.raises(TransportError):
        await provider.edit(ref, "v2")
    assert fake.count("update_activity") == 1


@pytest.mark.parametrize(
    ("operation", "reply"),
    [
        ("post", FakeTeams.error(500, "ServiceError")),
        ("post", FakeTeams.error(413, "MessageSizeTooBig")),
        ("post", FakeTeams.error(400, "BadArgument")),
        ("edit", FakeTeams.error(413, "MessageSizeTooBig")),
        ("edit", FakeTeams.error(400, "BadArgument")),
    ],
)
async def test_a_rejected_message_leaves_the_channel_working(
    fake: FakeTeams, provider: TeamsProvider, channel: str, operation: str, reply: Reply
) -> None:
    ref = await provider.post(channel, "before")
    fake.script("send_activity" if operation == "post" else "update_activity", reply)
    with pytest.raises(ProviderError) as caught:
        if operation == "post":
            await provider.post(channel, "refused")
        else:
            await provider.edit(ref, "refused")
    assert type(caught.value) is MessageRejected
    await provider.post(channel, "after")
    assert fake.texts(channel) == ["before", "after"]


async def test_throttled_surfaces_retry_after_at_once(
    fake: FakeTeams, provider: TeamsProvider, channel: str
) -> None:
    fake.script("send_activity", FakeTeams.error(429, "Throttled", retry_after=42))
    started = time.monotonic()
    with pytest.raises(RateLimited) as caught:
        await provider.post(channel, "too fast")
    assert caught.value.retry_after == 42.0
    assert time.monotonic() - started < 2.0


async def test_the_fakes_own_windows_throttle_a_burst(
    fake: FakeTeams, provider: TeamsProvider, channel: str
) -> None:
    for n in range(7):
        await provider.post(channel, f"burst {n}")
    with pytest.raises(RateLimited) as caught:
        await provider.post(channel, "eighth within a second")
    assert caught.value.retry_after is not None and 0 < caught.value.retry_after <= 1.0
    assert fake.throttled == 1


async def test_conversation_errors(fake: FakeTeams, provider: TeamsProvider, channel: str) -> None:
    ref = await provider.post(channel, "present")
    fake.remove_activity(channel, ref.message_id)
    with pytest.raises(NotFound, match="deleted"):
        await provider.edit(ref, "gone")
    fake.conversations[channel].bot_in_roster = False
    with pytest.raises(Forbidden, match="not a member"):
        await provider.post(channel, "removed")
    fake.conversations[channel].bot_in_roster = True
    fake.conversations[channel].blocked = True
    with pytest.raises(Unreachable, match="blocked"):
        await provider.post(channel, "blocked")
    with pytest.raises(Unreachable, match="does not exist"):
        await provider.post("19:nowhere@thread.tacv2", "nobody")


async def test_rejected_cached_token_is_refreshed_once(
    fake: FakeTeams, provider: TeamsProvider, channel: str
) -> None:
    await provider.post(channel, "first")
    fake.expire_tokens()
    await provider.post(channel, "second")
    assert fake.count("token") == 2
    assert fake.texts(channel) == ["first", "second"]


async def test_wrong_password_is_unreachable_and_never_shown(
    fake: FakeTeams,
    make_settings: Callable[..., TeamsSettings],
    channel: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    secret = "not-the-password-and-not-to-be-shown"
    async with TeamsProvider(make_settings(fake, app_password=secret), profile="p") as provider:
        with pytest.raises(Unreachable, match="app_password") as caught:
            await provider.post(channel, "hi")
        said = [repr(provider), str(caught.value), repr(caught.value), caplog.text]
    assert fake.count("send_activity") == 0
    for text in said:
        assert secret not in text


async def test_over_long_text_is_refused_before_sending(
    fake: FakeTeams, provider: TeamsProvider, channel: str
) -> None:
    with pytest.raises(MessageRejected, match="chunk it"):
        await provider.post(channel, "é" * 4001)  # 24,006 bytes as sent (\u00e9 each)
    with pytest.raises(MessageRejected, match="chunk it"):
        await provider.post(channel, "\x1b" * 4001)  # 4,001 UTF-8 bytes, 24,006 as sent
    assert fake.count("send_activity") == 0
    # Text at the maximum as sent fits Teams' payload cap, whatever it holds.
    await provider.post(channel, "\N{GRINNING FACE}" * 2000)
    await provider.post(channel, '"' * 12000)
    await provider.post(channel, "\x1b" * 4000)
    await provider.post(channel, "a" * 24000)


async def test_blocking_io_stays_off_the_event_loop(
    fake: FakeTeams, provider: TeamsProvider, channel: str
) -> None:
    await provider.post(channel, "warm up")
    fake.script("send_activity", Reply.slow(0.8, FakeTeams.error(503, "ServiceUnavailable")))
    gaps: list[float] = []
    done = anyio.Event()

    async def tick() -> None:
        last = time.monotonic()
        while not done.is_set():
            await anyio.sleep(0.01)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(tick)
        with pytest.raises(TransportError):
            await provider.post(channel, "slow")
        done.set()
    assert len(gaps) > 20 and max(gaps) < 0.25


async def test_no_reference_and_no_service_url_is_unreachable(
    fake: FakeTeams, make_settings: Callable[..., TeamsSettings], channel: str
) -> None:
    settings = make_settings(fake, service_url=None)
    async with TeamsProvider(settings, profile="p") as provider:
        with pytest.raises(Unreachable, match="no conversation reference"):
            await provider.post(channel, "where to?")
    assert fake.count("send_activity") == 0


def test_escape_neutralises_at_tags_and_mass_pings(
    fake: FakeTeams, make_settings: Callable[..., TeamsSettings]
) -> None:
    provider = TeamsProvider(make_settings(fake), profile="p")
    escaped = provider.escape("<at>Everyone</at> and @everyone <AT id='1'>x</AT>")
    assert "<at" not in escaped.lower() and "</at" not in escaped.lower()
    assert "@everyone" not in escaped
    assert provider.escape("a < b & c") == "a &lt; b &amp; c"


async def test_a_redirect_is_not_followed(
    fake: FakeTeams, provider: TeamsProvider, channel: str
) -> None:
    # requests would repeat the POST at a 307's Location: one request, a TransportError.
    await provider.post(channel, "first")
    again = fake.last("send_activity").path
    fake.script("send_activity", Reply(status=307, headers={"Location": again}))
    with pytest.raises(TransportError, match="redirect"):
        await provider.post(channel, "moved")
    assert fake.count("send_activity") == 2


async def test_throttled_without_retry_after_lets_the_sender_back_off(
    fake: FakeTeams, provider: TeamsProvider, channel: str
) -> None:
    fake.script("send_activity", FakeTeams.error(429, "Throttled"))
    with pytest.raises(RateLimited) as caught:
        await provider.post(channel, "too fast")
    assert caught.value.retry_after is None


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (Reply.dropped(), TransportError),
        (Reply.json({"error": "temporarily_unavailable"}, status=503), TransportError),
        (Reply.json({"error": "timeout"}, status=408), TransportError),
        (Reply.json({"error": "invalid_client"}, status=401), Unreachable),
        (Reply.json({"error": "unauthorized_client"}, status=400), Unreachable),
    ],
)
async def test_token_service_failures(
    fake: FakeTeams,
    provider: TeamsProvider,
    channel: str,
    reply: Reply,
    expected: type[ProviderError],
) -> None:
    fake.script("token", reply)
    with pytest.raises(expected):
        await provider.post(channel, "needs a token")
    assert fake.count("send_activity") == 0
    await provider.post(channel, "the token service is back")  # nothing stuck


async def test_a_throttled_token_service_is_a_wait_not_a_refusal(
    fake: FakeTeams, provider: TeamsProvider, channel: str
) -> None:
    # Entra ID answers 429 with Retry-After when it throttles; Unreachable would stop the
    # channel for good over a wait of seconds.
    throttled = {"error": "temporarily_unavailable", "error_description": "AADSTS50196"}
    fake.script("token", Reply.json(throttled, status=429, headers={"Retry-After": "30"}))
    with pytest.raises(RateLimited) as caught:
        await provider.post(channel, "needs a token")
    assert caught.value.retry_after == 30.0
    assert "throttled" in str(caught.value)
    assert fake.count("token") == 1 and fake.count("send_activity") == 0
    await provider.post(channel, "the token service is back")
