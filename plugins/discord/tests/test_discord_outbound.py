from __future__ import annotations

import logging
import time
from collections.abc import Callable

import discord
import pytest
from bridge_discord import DiscordProvider, DiscordSettings
from bridge_discord.testing.fake_discord import FakeDiscord

from bridge_core import (
    Forbidden,
    MessageRef,
    MessageRejected,
    NotFound,
    ProviderError,
    RateLimited,
    TransportError,
    Unreachable,
    posting_with_key,
)
from bridge_core.testing import Reply

pytestmark = pytest.mark.anyio


async def test_post_sends_content_nonce_and_no_mentions(
    fake: FakeDiscord, provider: DiscordProvider, channel: int
) -> None:
    ref = await provider.post(str(channel), "hello @everyone")
    assert ref.channel == str(channel) and ref.thread is None
    sent = fake.last("create_message")
    assert sent.header("Authorization") == f"Bot {fake.token}"
    body = sent.json
    assert body["content"] == "hello @everyone"
    assert body["allowed_mentions"] == {"parse": []}  # nobody may be pinged
    assert body["enforce_nonce"] is True and 0 < len(body["nonce"]) <= 25
    assert [m["id"] for m in fake.messages_in(channel)] == [ref.message_id]


async def test_post_to_thread_and_edit(
    fake: FakeDiscord, provider: DiscordProvider, channel: int, thread: int
) -> None:
    ref = await provider.post(str(channel), "first", thread=str(thread))
    assert ref == MessageRef(channel=str(channel), message_id=ref.message_id, thread=str(thread))
    assert fake.last("create_message").path.endswith(f"/channels/{thread}/messages")
    assert await provider.edit(ref, "second") == ref
    edit = fake.last("edit_message")
    assert edit.path.endswith(f"/channels/{thread}/messages/{ref.message_id}")
    assert edit.json["content"] == "second"
    assert fake.messages_in(thread)[0]["content"] == "second"


async def test_a_lost_answer_is_one_request_and_a_transport_error(
    fake: FakeDiscord, provider: DiscordProvider, channel: int
) -> None:
    # Discord applies the create but the answer is lost (500): the provider does not resend
    # behind the ledger's back (the ledger's resend is marked as a possible duplicate).
    fake.lose_responses(1)
    with pytest.raises(TransportError):
        await provider.post(str(channel), "exactly once")
    assert fake.count("create_message") == 1
    assert len(fake.messages_in(channel)) == 1


async def test_each_post_has_its_own_nonce(
    fake: FakeDiscord, provider: DiscordProvider, channel: int
) -> None:
    first = await provider.post(str(channel), "same text")
    second = await provider.post(str(channel), "same text")
    assert first.message_id != second.message_id
    nonces = {r.json["nonce"] for r in fake.requests_to("create_message")}
    assert len(nonces) == 2


async def test_a_ledger_part_resent_after_a_lost_answer_finds_the_first_message(
    fake: FakeDiscord, provider: DiscordProvider, channel: int
) -> None:
    # The create reached Discord but its answer was lost; the ledger resends the part under the
    # same post_key, whose nonce Discord has seen: the first message comes back, no second.
    fake.lose_responses(1)
    with posting_with_key("obligation-42:0"), pytest.raises(TransportError):
        await provider.post(str(channel), "part one")
    with posting_with_key("obligation-42:0"):
        ref = await provider.post(str(channel), "part one")
    assert [m["id"] for m in fake.messages_in(channel)] == [ref.message_id]
    first, second = (r.json["nonce"] for r in fake.requests_to("create_message"))
    assert first == second and len(first) == 25
    with posting_with_key("obligation-42:1"):
        await provider.post(str(channel), "part two")
    assert len(fake.messages_in(channel)) == 2  # another part, another nonce


async def test_short_429_surfaces_at_once(
    fake: FakeDiscord, provider: DiscordProvider, channel: int
) -> None:
    fake.script("create_message", FakeDiscord.rate_limited(0.2))
    with pytest.raises(RateLimited) as caught:
        await provider.post(str(channel), "too soon")
    assert caught.value.retry_after == pytest.approx(0.2)
    assert fake.count("create_message") == 1
    await provider.post(str(channel), "after the wait the sender takes")
    assert fake.count("create_message") == 2


async def test_long_429_surfaces_with_retry_after(
    fake: FakeDiscord, provider: DiscordProvider, channel: int
) -> None:
    fake.script("create_message", FakeDiscord.rate_limited(90.0))
    with pytest.raises(RateLimited) as caught:
        await provider.post(str(channel), "too soon")
    assert caught.value.retry_after == pytest.approx(90.0)
    assert fake.count("create_message") == 1


async def test_our_deadline_bounds_a_call_with_no_answer(
    fake: FakeDiscord, make_settings: Callable[..., DiscordSettings], channel: int
) -> None:
    fake.script("create_message", Reply.slow(5.0))
    async with DiscordProvider(make_settings(fake, call_deadline=0.5), profile="p") as provider:
        started = time.monotonic()
        with pytest.raises(TransportError, match="deadline"):
            await provider.post(str(channel), "bounded")
        assert time.monotonic() - started < 3.0
    assert fake.count("create_message") == 1


async def test_429_without_via_reads_as_rate_limit(
    fake: FakeDiscord, provider: DiscordProvider, channel: int
) -> None:
    # Without Via discord.py takes a 429 for a Cloudflare block and raises at once.
    blocked = Reply.text("error code: 1015", status=429, headers={"Retry-After": "120"})
    fake.script("create_message", blocked)
    with pytest.raises(RateLimited) as caught:
        await provider.post(str(channel), "blocked")
    assert caught.value.retry_after == pytest.approx(120.0)
    assert fake.count("create_message") == 1


async def test_the_platforms_own_limit_surfaces_as_rate_limited(
    fake: FakeDiscord, provider: DiscordProvider, channel: int
) -> None:
    # The fake allows 5 creates per 5 s per channel. The provider keeps no bucket of its own
    # (the core's sender paces by the declared budget): the sixth create meets Discord's 429.
    for n in range(5):
        await provider.post(str(channel), f"message {n}")
    with pytest.raises(RateLimited) as caught:
        await provider.post(str(channel), "one too many")
    assert caught.value.retry_after is not None and 0 < caught.value.retry_after <= 5.0
    assert fake.count("create_message") == 6 and fake.rate_limited_creates == 1


@pytest.mark.parametrize(
    ("setup", "expected"),
    [
        ({"visible": False}, Forbidden),
        ({"can_send": False}, Forbidden),
    ],
)
async def test_channel_access_errors(
    fake: FakeDiscord,
    provider: DiscordProvider,
    channel: int,
    setup: dict[str, bool],
    expected: type[ProviderError],
) -> None:
    for key, value in setup.items():
        setattr(fake.channels[channel], key, value)
    with pytest.raises(expected, match="Discord refused post to channel"):
        await provider.post(str(channel), "denied")


async def test_archived_thread_is_forbidden(
    fake: FakeDiscord, provider: DiscordProvider, channel: int, thread: int
) -> None:
    fake.channels[thread].archived = True
    with pytest.raises(Forbidden, match="archived"):
        await provider.post(str(channel), "late", thread=str(thread))


async def test_unknown_channel_is_unreachable(provider: DiscordProvider) -> None:
    with pytest.raises(Unreachable, match="Unknown Channel"):
        await provider.post("333333333333333333", "nobody home")


async def test_non_numeric_channel_is_unreachable(
    fake: FakeDiscord, provider: DiscordProvider
) -> None:
    with pytest.raises(Unreachable, match="not a Discord id"):
        await provider.post("#general", "hi")
    assert fake.count("create_message") == 0


async def test_edit_of_deleted_message_is_not_found(
    fake: FakeDiscord, provider: DiscordProvider, channel: int
) -> None:
    ref = await provider.post(str(channel), "soon gone")
    with fake.lock:
        fake.channels[channel].message_ids.remove(int(ref.message_id))
        del fake.messages[int(ref.message_id)]
    with pytest.raises(NotFound, match="Unknown Message"):
        await provider.edit(ref, "too late")


async def test_too_many_old_edits_reads_as_not_found(
    fake: FakeDiscord, provider: DiscordProvider, channel: int
) -> None:
    ref = await provider.post(str(channel), "live")
    # Discord answers 30046 (edits to a message older than an hour) with a 400; the live message
    # is then best replaced by a new one, which is what NotFound tells the core.
    fake.script("edit_message", FakeDiscord.error(400, 30046, "Maximum number of edits reached"))
    with pytest.raises(NotFound, match="too many edits"):
        await provider.edit(ref, "once more")


@pytest.mark.parametrize(
    ("status", "code", "message"),
    [
        (400, 50035, "Invalid Form Body"),
        (400, 50006, "Cannot send an empty message"),
        (400, 50109, "The request body contains invalid JSON."),
        (413, 40005, "Request entity too large"),
        (400, 0, "Bad Request"),  # a code we do not know: the status says it is the body
        (422, 0, "Unprocessable Entity"),
    ],
)
@pytest.mark.parametrize("operation", ["post", "edit"])
async def test_a_refused_body_is_rejected_and_the_channel_carries_on(
    fake: FakeDiscord,
    provider: DiscordProvider,
    channel: int,
    status: int,
    code: int,
    message: str,
    operation: str,
) -> None:
    ref = await provider.post(str(channel), "before")
    route = "create_message" if operation == "post" else "edit_message"
    fake.script(route, FakeDiscord.error(status, code, message))
    with pytest.raises(ProviderError) as caught:
        if operation == "post":
            await provider.post(str(channel), "refused")
        else:
            await provider.edit(ref, "refused")
    assert type(caught.value) is MessageRejected, f"{status}/{code} must not give the channel up"
    assert f"HTTP {status}" in str(caught.value)
    await provider.post(str(channel), "after")
    assert [m["content"] for m in fake.messages_in(channel)] == ["before", "after"]


@pytest.mark.parametrize(
    ("status", "code", "message"),
    [(401, 0, "401: Unauthorized"), (404, 10003, "Unknown Channel"), (405, 0, "Not Allowed")],
)
async def test_a_dead_channel_or_token_stays_unreachable(
    fake: FakeDiscord,
    provider: DiscordProvider,
    channel: int,
    status: int,
    code: int,
    message: str,
) -> None:
    await provider.post(str(channel), "warm up")
    fake.script("create_message", FakeDiscord.error(status, code, message))
    with pytest.raises(ProviderError) as caught:
        await provider.post(str(channel), "refused")
    assert type(caught.value) is Unreachable


async def test_server_error_is_transport(
    fake: FakeDiscord, provider: DiscordProvider, channel: int
) -> None:
    fake.script("create_message", FakeDiscord.error(503, 0, "Service Unavailable"))
    with pytest.raises(TransportError, match="server error") as caught:
        await provider.post(str(channel), "later")
    # discord.py's exception (its response's request holds the token) is never chained.
    assert caught.value.__cause__ is None and caught.value.__context__ is None
    assert fake.messages_in(channel) == []


async def test_dropped_connection_is_transport(
    fake: FakeDiscord, provider: DiscordProvider, channel: int
) -> None:
    await provider.post(str(channel), "warm up")  # login first, so the drop hits the create
    fake.script("create_message", Reply.dropped())
    with pytest.raises(TransportError):
        await provider.post(str(channel), "into the void")


async def test_over_long_text_is_refused_before_sending(
    fake: FakeDiscord, provider: DiscordProvider, channel: int
) -> None:
    with pytest.raises(MessageRejected, match="chunk it"):
        await provider.post(str(channel), "x" * 2001)
    assert fake.count("create_message") == 0
    # 2,000 UTF-16 units fit; an astral character counts twice.
    await provider.post(str(channel), "x" * 2000)
    with pytest.raises(MessageRejected):
        await provider.post(str(channel), "\N{GRINNING FACE}" * 1001)


async def test_probe(fake: FakeDiscord, provider: DiscordProvider, channel: int) -> None:
    assert await provider.probe(str(channel)) is True
    fake.channels[channel].visible = False
    assert await provider.probe(str(channel)) is False
    assert await provider.probe("444444444444444444") is False


async def test_a_probe_whose_connection_drops_is_one_request(
    fake: FakeDiscord, provider: DiscordProvider, channel: int
) -> None:
    # A GET, which aiohttp would send again by itself on a dropped connection: the REST
    # session turns that off.
    assert await provider.probe(str(channel)) is True  # a kept-alive connection to lose
    fake.script("get_channel", Reply.dropped())
    with pytest.raises(TransportError):
        await provider.probe(str(channel))
    assert fake.count("get_channel") == 2


async def test_wrong_token_is_unreachable_and_never_shown(
    fake: FakeDiscord,
    make_settings: Callable[..., DiscordSettings],
    channel: int,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    secret = "wrong-token-that-must-not-leak"
    async with DiscordProvider(make_settings(fake, token=secret), profile="p") as provider:
        with pytest.raises(Unreachable) as caught:
            await provider.post(str(channel), "hi")
        assert secret not in repr(provider)
    assert "token" in str(caught.value)
    assert fake.count("create_message") == 1  # no login first: the create itself is refused
    for text in (str(caught.value), repr(caught.value), caplog.text):
        assert secret not in text


async def test_token_never_in_logs_reprs_or_settings(
    fake: FakeDiscord,
    provider: DiscordProvider,
    make_settings: Callable[..., DiscordSettings],
    channel: int,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    fake.script("create_message", FakeDiscord.error(503, 0, "Service Unavailable"))
    with pytest.raises(TransportError) as caught:
        await provider.post(str(channel), "x")
    await provider.post(str(channel), "y")
    settings = make_settings(fake)
    for text in (repr(provider), repr(settings), str(settings), str(caught.value), caplog.text):
        assert fake.token not in text


async def test_two_providers_two_bases_do_not_leak(
    fake: FakeDiscord, provider: DiscordProvider, make_settings: Callable[..., DiscordSettings]
) -> None:
    with FakeDiscord(token="other-token") as other:
        other.add_channel(555_555_555_555_555_555)
        fake_channel = next(iter(fake.channels))
        async with DiscordProvider(make_settings(other), profile="other") as second:
            await second.post("555555555555555555", "to the other one")
            await provider.post(str(fake_channel), "to the first one")
        assert other.count("create_message") == 1
        assert fake.count("create_message") == 1
    assert discord.http.Route.BASE == "https://discord.com/api/v10"


def test_escape_breaks_mass_mentions(
    fake: FakeDiscord, make_settings: Callable[..., DiscordSettings]
) -> None:
    provider = DiscordProvider(make_settings(fake), profile="p")
    escaped = provider.escape("@everyone and @here, <@123>")
    assert "@everyone" not in escaped and "@here" not in escaped
    assert "<@123>" in escaped  # harmless with allowed_mentions none, and useful to read


async def test_global_429_surfaces_and_says_so(
    fake: FakeDiscord, provider: DiscordProvider, channel: int
) -> None:
    fake.script("create_message", FakeDiscord.rate_limited(0.2, is_global=True))
    with pytest.raises(RateLimited, match="globally") as caught:
        await provider.post(str(channel), "during the global limit")
    assert caught.value.retry_after == pytest.approx(0.2)
    assert fake.count("create_message") == 1


async def test_sends_need_no_login(
    fake: FakeDiscord, make_settings: Callable[..., DiscordSettings], channel: int
) -> None:
    # Only the gateway logs in (GET /users/@me); a send is its one request and nothing else.
    fake.script("get_me", FakeDiscord.error(503, 0, "Service Unavailable"), times=None)
    async with DiscordProvider(make_settings(fake), profile="p") as provider:
        ref = await provider.post(str(channel), "no login needed")
        await provider.edit(ref, "still none")
    assert fake.count("get_me") == 0
    assert len(fake.requests) == 2
