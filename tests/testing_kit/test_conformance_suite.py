"""The conformance suite itself: a small REST provider on httpx passes it, and each way of
breaking the contract makes it fail.

``ToyChat`` is a made-up REST chat API served by a ``FakePlatform``; ``ToyProvider`` is what a
plugin for such an API looks like (the cookiecutter template follows the same shape). The
mutants each break one promise, and the suite's matching test must catch it.
"""

from __future__ import annotations

import dataclasses
import hmac
import itertools
import json
import zlib
from collections.abc import Callable, Sequence
from typing import Any

import anyio
import anyio.lowlevel
import httpx
import pytest
from pydantic import BaseModel, ConfigDict, SecretStr

from bridge_core.hookspecs import ProviderContext, ProviderType, hookimpl
from bridge_core.provider import (
    UNLIMITED_BUDGET,
    Capabilities,
    ChatProvider,
    Forbidden,
    HttpRequest,
    HttpResponse,
    HttpRoute,
    InboundMessage,
    InboundSink,
    LengthUnit,
    MessageRef,
    MessageRejected,
    NotFound,
    ProviderError,
    RateLimited,
    TransportError,
    Unreachable,
)
from bridge_core.testing import conformance
from bridge_core.testing.conformance import (
    ConformanceHarness,
    Fault,
    Inbound,
    Operation,
    ProviderConformance,
    http_inbound,
)
from bridge_core.testing.fake_platform import FakePlatform, RecordedRequest, Reply
from bridge_core.text import chunk, measure, neutralise_mass_mentions

pytestmark = pytest.mark.anyio

TOKEN = "toy-secret-token-42"
SELF_USER = "toy-bridge"
MAX = 500
RETRY_AFTER = 2.0  # the mutant that sleeps on it costs this much

# --------------------------------------------------------------------------- the fake API


class FakeToyChat(FakePlatform):
    """``POST /v1/channels/{channel}/messages`` and ``PATCH …/messages/{id}``, Bearer auth."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: dict[str, tuple[str, str]] = {}  # id -> (channel, text)
        self.counts = LengthUnit.CHARACTERS  # what the platform counts against MAX
        self._ids = itertools.count(1)
        self.add_route("POST", "/v1/channels/{channel}/messages", self._create, name="create")
        self.add_route("PATCH", "/v1/channels/{channel}/messages/{id}", self._edit, name="edit")

    @staticmethod
    def refusal(status: int, code: str) -> Reply:
        return Reply.json({"code": code}, status=status)

    def _check(self, request: RecordedRequest) -> Reply | str:
        if request.header("Authorization") != f"Bearer {TOKEN}":
            return self.refusal(401, "bad_token")
        if request.content_type != "application/json":
            return self.refusal(415, "json_only")
        text = request.json.get("text")
        if not isinstance(text, str) or not text:
            return self.refusal(400, "no_text")
        if measure(text, self.counts) > MAX:
            return self.refusal(400, "too_long")
        return text

    def _create(self, request: RecordedRequest) -> Reply:
        text = self._check(request)
        if isinstance(text, Reply):
            return text
        with self.lock:
            message_id = f"m{next(self._ids)}"
            self.messages[message_id] = (request.params["channel"], text)
        return Reply.json({"id": message_id}, status=201)

    def _edit(self, request: RecordedRequest) -> Reply:
        text = self._check(request)
        if isinstance(text, Reply):
            return text
        with self.lock:
            key = request.params["id"]
            if key not in self.messages:
                return self.refusal(404, "unknown_message")
            self.messages[key] = (request.params["channel"], text)
        return Reply.json({"id": key})

    def texts(self, channel: str) -> list[str]:
        with self.lock:
            return [text for where, text in self.messages.values() if where == channel]


# --------------------------------------------------------------------------- the provider


class ToySettings(BaseModel):
    """A ToyChat profile's settings."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    token: SecretStr
    """The bot's API token."""
    api_base_url: str
    """Where ToyChat's API is."""
    timeout: float = 0.5
    """Seconds one request may take."""


class ToyProvider(ChatProvider):
    name = "toy"
    capabilities = Capabilities(edit=True, max_length=MAX, threads=False)

    def __init__(self, settings: ToySettings) -> None:
        self.settings = settings
        self._client: httpx.AsyncClient | None = None

    def __repr__(self) -> str:
        return f"ToyProvider({self.settings.api_base_url!r})"

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(
                base_url=self.settings.api_base_url,
                headers={"Authorization": f"Bearer {self.settings.token.get_secret_value()}"},
                timeout=self.settings.timeout,
            )
        return self._client

    def refuse_over_long(self, text: str) -> None:
        if len(text) > MAX:
            raise MessageRejected(f"text of {len(text)} characters is over {MAX}: chunk it first")

    def read_error(self, response: httpx.Response) -> ProviderError:
        code = response.json().get("code") if response.content else None
        if response.status_code == 429:
            return RateLimited("toy: slow down", retry_after=float(response.headers["Retry-After"]))
        if code == "unknown_message":
            return NotFound("toy: the message is gone")
        if response.status_code == 403:
            return Forbidden("toy: no access to the channel")
        if response.status_code in (400, 413, 422):
            return MessageRejected(f"toy: refused the message with {code}")
        if response.status_code in (401, 404, 410):
            return Unreachable(f"toy: refused with {code}")
        return TransportError(f"toy: HTTP {response.status_code}")

    async def send(self, method: str, path: str, text: str) -> str:
        try:
            response = await self._http().request(method, path, json={"text": text})
        except httpx.TransportError as exc:
            raise TransportError(f"toy: {type(exc).__name__}") from None
        if response.status_code >= 300:
            raise self.read_error(response)
        return str(response.json()["id"])

    async def post(self, channel: str, text: str, *, thread: str | None = None) -> MessageRef:
        self.refuse_over_long(text)
        message_id = await self.send("POST", f"/v1/channels/{channel}/messages", text)
        return MessageRef(channel=channel, message_id=message_id)

    async def edit(self, ref: MessageRef, text: str) -> MessageRef:
        self.refuse_over_long(text)
        path = f"/v1/channels/{ref.channel}/messages/{ref.message_id}"
        await self.send("PATCH", path, text)
        return ref

    def escape(self, text: str) -> str:
        return neutralise_mass_mentions(text)

    def http_routes(self, sink: InboundSink) -> Sequence[HttpRoute]:
        async def handle(request: HttpRequest) -> HttpResponse:
            expected = self.settings.token.get_secret_value()
            if not hmac.compare_digest(request.header("X-Toy-Token") or "", expected):
                return HttpResponse(status=401)
            event = json.loads(request.body)
            if self.accepts(event):
                message = InboundMessage(
                    message_id=event["id"],
                    channel=event["channel"],
                    author=event["user"],
                    text=event["text"],
                    at=0.0,
                    platform="toy",
                )
                await sink(message)
            return HttpResponse(status=200)

        return (HttpRoute("POST", "/toy/events", handle),)

    def accepts(self, event: dict[str, Any]) -> bool:
        return not event["is_bot"] and event["user"] != SELF_USER

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()


def toy_type(provider_class: type[ToyProvider] = ToyProvider) -> ProviderType:
    return ProviderType(
        name="toy",
        capabilities=ToyProvider.capabilities,
        budget=UNLIMITED_BUDGET,
        settings_model=ToySettings,
        factory=lambda settings, context: provider_class(settings),
    )


class ToyPlugin:
    @hookimpl
    def register_providers(self, register: Callable[[ProviderType], None]) -> None:
        register(toy_type())


# --------------------------------------------------------------------------- the harness


@pytest.fixture
def toy(start_fake: Callable[[FakeToyChat], FakeToyChat]) -> FakeToyChat:
    return start_fake(FakeToyChat())


def toy_event(kind: Inbound, text: str) -> HttpRequest:
    event = {
        "id": f"m-{zlib.crc32(text.encode())}",
        "channel": "general",
        "user": SELF_USER if kind is Inbound.SELF else "alice",
        "is_bot": kind is Inbound.BOT,
        "text": text,
    }
    token = "forged" if kind is Inbound.FORGED else TOKEN
    return HttpRequest(
        method="POST",
        path="/toy/events",
        headers={"X-Toy-Token": token},
        body=json.dumps(event).encode(),
    )


def make_harness(toy: FakeToyChat, provider_class: type[ToyProvider]) -> ConformanceHarness:
    routes = {"post": "create", "edit": "edit"}
    replies = {
        Fault.RATE_LIMITED: Reply.json(
            {"code": "slow_down"}, status=429, headers={"Retry-After": str(RETRY_AFTER)}
        ),
        Fault.NOT_FOUND: FakeToyChat.refusal(404, "unknown_message"),
        Fault.FORBIDDEN: FakeToyChat.refusal(403, "no_access"),
        Fault.UNREACHABLE: FakeToyChat.refusal(410, "channel_deleted"),
        Fault.REJECTED: FakeToyChat.refusal(422, "invalid_body"),
        Fault.SERVER_ERROR: FakeToyChat.refusal(502, "bad_gateway"),
        Fault.DROPPED: Reply.dropped(),
        Fault.SLOW: Reply.slow(3.0),
    }

    def script_fault(fault: Fault, operation: Operation) -> float | None:
        toy.script(routes[operation], replies[fault])
        return RETRY_AFTER if fault is Fault.RATE_LIMITED else None

    return ConformanceHarness(
        provider_type=toy_type(provider_class),
        settings={"token": TOKEN, "api_base_url": toy.base_url},
        channel="general",
        context=ProviderContext(profile="toy"),
        secrets=(TOKEN,),
        script_fault=script_fault,
        delivered=toy.texts,
        request_count=toy.count,
        plugin=ToyPlugin(),
        inbound=http_inbound("POST", "/toy/events", toy_event),
    )


class TestToyConformance(ProviderConformance):
    @pytest.fixture
    def harness(self, toy: FakeToyChat) -> ConformanceHarness:
        return make_harness(toy, ToyProvider)


# --------------------------------------------------------------------------- the mutants


class SleepsOnRateLimit(ToyProvider):
    def read_error(self, response: httpx.Response) -> ProviderError:
        error = super().read_error(response)
        if isinstance(error, RateLimited):
            # A blocking sleep, as an SDK's built-in rate-limit handler would do.
            import time

            time.sleep(error.retry_after or 0)
        return error


class EverythingTransient(ToyProvider):
    def read_error(self, response: httpx.Response) -> ProviderError:
        return TransportError(f"toy: HTTP {response.status_code}")


class LeaksToken(ToyProvider):
    def read_error(self, response: httpx.Response) -> ProviderError:
        error = super().read_error(response)
        token = self.settings.token.get_secret_value()
        return type(error)(f"{error} (sent with token {token})")


class NoEscape(ToyProvider):
    def escape(self, text: str) -> str:
        return text


class Truncates(ToyProvider):
    def refuse_over_long(self, text: str) -> None:
        return None

    async def post(self, channel: str, text: str, *, thread: str | None = None) -> MessageRef:
        return await super().post(channel, text[:MAX], thread=thread)


class OverLongEndsTheChannel(ToyProvider):
    def refuse_over_long(self, text: str) -> None:
        if len(text) > MAX:
            raise Unreachable(f"text of {len(text)} characters is over {MAX}")


class EditReposts(ToyProvider):
    async def edit(self, ref: MessageRef, text: str) -> MessageRef:
        return await self.post(ref.channel, text)


class ConnectsEagerly(ToyProvider):
    def __init__(self, settings: ToySettings) -> None:
        super().__init__(settings)
        httpx.post(settings.api_base_url + "/v1/channels/general/messages", json={"text": "hi"})


class ClaimsNoEditButEdits(ToyProvider):
    capabilities = Capabilities(edit=False, max_length=MAX)


class ForwardsBots(ToyProvider):
    def accepts(self, event: dict[str, Any]) -> bool:
        return True


class FreshIdsOnRedelivery(ToyProvider):
    deliveries = itertools.count()

    def http_routes(self, sink: InboundSink) -> Sequence[HttpRoute]:
        async def renamed(message: InboundMessage) -> None:
            fresh = f"{message.message_id}-{next(self.deliveries)}"
            await sink(dataclasses.replace(message, message_id=fresh))

        return super().http_routes(renamed)


class ResendsOnServerError(ToyProvider):
    async def send(self, method: str, path: str, text: str) -> str:
        try:
            return await super().send(method, path, text)
        except TransportError:  # as an SDK's retry policy would, behind the ledger's back
            return await super().send(method, path, text)


class WaitsOnServerError(ToyProvider):
    async def send(self, method: str, path: str, text: str) -> str:
        try:
            return await super().send(method, path, text)
        except TransportError:
            await anyio.sleep(2.5)  # a backoff inside the call, then the error anyway
            raise


class WedgesWhenCutOff(ToyProvider):
    """A bucket whose token is given back after the call, in an await that a cancellation of
    the call also cancels: discord.py's ``Ratelimit.__aexit__`` did this."""

    tokens = 1

    async def send(self, method: str, path: str, text: str) -> str:
        while self.tokens <= 0:  # noqa: ASYNC110 - the bucket being modelled polls
            await anyio.sleep(0.05)
        self.tokens -= 1
        try:
            return await super().send(method, path, text)
        finally:
            # Cancelled along with the call: the token is never returned.
            await anyio.lowlevel.checkpoint()
            self.tokens += 1


class SplitsAtCodePoints(ToyProvider):
    """Re-cuts what the core chunked, at code points, as a provider with a smaller limit of
    its own might."""

    async def post(self, channel: str, text: str, *, thread: str | None = None) -> MessageRef:
        ref = None
        for piece in [text[i : i + 97] for i in range(0, len(text), 97)] or [text]:
            ref = await super().post(channel, piece, thread=thread)
        assert ref is not None
        return ref


SUITE = ProviderConformance()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.parametrize("operation", ["post", "edit"])
async def test_catches_a_provider_that_resends_inside_a_call(
    toy: FakeToyChat, operation: Operation
) -> None:
    harness = make_harness(toy, ResendsOnServerError)
    with pytest.raises(AssertionError, match="saw 2 requests for one call"):
        await SUITE.test_fault_maps_onto_the_taxonomy(harness, Fault.SERVER_ERROR, operation)


async def test_catches_a_provider_that_waits_inside_a_call(toy: FakeToyChat) -> None:
    harness = make_harness(toy, WaitsOnServerError)
    with pytest.raises(AssertionError, match="waited inside the call"):
        await SUITE.test_fault_maps_onto_the_taxonomy(harness, Fault.SERVER_ERROR, "post")


async def test_catches_a_provider_wedged_by_a_cut_off_call(
    toy: FakeToyChat, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The mutant never gives its token back, so its next post waits forever: a second shows it
    # as well as the 10 s a real provider gets (which kept this test waiting 10 s).
    monkeypatch.setattr(conformance, "_WEDGED_AFTER", 1.0)
    harness = make_harness(toy, WedgesWhenCutOff)
    with pytest.raises(AssertionError, match="wedged"):
        await SUITE.test_a_call_cut_off_leaves_nothing_behind(harness, Fault.SLOW)


async def test_catches_a_provider_that_splits_grapheme_clusters(toy: FakeToyChat) -> None:
    harness = make_harness(toy, SplitsAtCodePoints)
    with pytest.raises(AssertionError, match=r"splits a grapheme cluster|whole and unaltered"):
        await SUITE.test_chunks_at_the_declared_maximum_are_accepted(harness)


async def test_catches_a_unit_the_platform_does_not_count(toy: FakeToyChat) -> None:
    toy.counts = LengthUnit.BYTES  # the platform counts UTF-8 bytes; the toy declares characters
    harness = make_harness(toy, ToyProvider)
    with pytest.raises(AssertionError, match="declare the unit the platform counts"):
        await SUITE.test_text_at_the_maximum_is_accepted_whatever_it_holds(harness)


async def test_catches_a_marker_headroom_in_the_wrong_unit(toy: FakeToyChat) -> None:
    toy.counts = LengthUnit.BYTES
    harness = make_harness(toy, ToyProvider)
    with pytest.raises(ProviderError):
        await SUITE.test_a_part_resent_with_the_marker_still_fits(harness)


def test_the_toy_fake_counts_what_it_is_told() -> None:
    # The mutants above rely on it: 250 "é" are 250 characters but 500 bytes.
    assert measure("é" * 250, LengthUnit.BYTES) == MAX
    assert chunk("é" * 300, MAX, unit=LengthUnit.BYTES) == ["é" * 250, "é" * 50]


async def test_catches_a_provider_that_sleeps_on_a_rate_limit(toy: FakeToyChat) -> None:
    harness = make_harness(toy, SleepsOnRateLimit)
    with pytest.raises(AssertionError, match="slept"):
        await SUITE.test_fault_maps_onto_the_taxonomy(harness, Fault.RATE_LIMITED, "post")


@pytest.mark.parametrize(
    "fault", [Fault.RATE_LIMITED, Fault.NOT_FOUND, Fault.FORBIDDEN, Fault.REJECTED]
)
async def test_catches_a_provider_that_maps_errors_wrongly(toy: FakeToyChat, fault: Fault) -> None:
    harness = make_harness(toy, EverythingTransient)
    with pytest.raises(AssertionError, match=f"expected {fault.expected.__name__}"):
        await SUITE.test_fault_maps_onto_the_taxonomy(harness, fault, "edit")


async def test_catches_a_token_in_an_error_message(
    toy: FakeToyChat, caplog: pytest.LogCaptureFixture
) -> None:
    harness = make_harness(toy, LeaksToken)
    with pytest.raises(AssertionError, match="secret leaked"):
        await SUITE.test_secrets_never_leak(harness, caplog)


async def test_catches_a_token_in_a_log_record(
    toy: FakeToyChat, caplog: pytest.LogCaptureFixture
) -> None:
    class LogsToken(ToyProvider):
        async def post(self, channel: str, text: str, *, thread: str | None = None) -> MessageRef:
            import logging

            secret = self.settings.token.get_secret_value()
            logging.getLogger("toy").debug("posting with %s", secret)
            return await super().post(channel, text, thread=thread)

    with pytest.raises(AssertionError, match="secret leaked"):
        await SUITE.test_secrets_never_leak(make_harness(toy, LogsToken), caplog)


async def test_catches_an_escape_that_lets_everyone_be_pinged(toy: FakeToyChat) -> None:
    with pytest.raises(AssertionError, match="survived escape"):
        await SUITE.test_escape_prevents_mass_pings(make_harness(toy, NoEscape))


async def test_catches_truncation_instead_of_refusal(toy: FakeToyChat) -> None:
    with pytest.raises(pytest.fail.Exception, match="DID NOT RAISE"):
        await SUITE.test_over_long_text_is_refused(make_harness(toy, Truncates))


async def test_catches_over_long_text_refused_as_a_dead_channel(toy: FakeToyChat) -> None:
    with pytest.raises(AssertionError, match="MessageRejected"):
        await SUITE.test_over_long_text_is_refused(make_harness(toy, OverLongEndsTheChannel))


async def test_catches_an_edit_that_posts_a_new_message(toy: FakeToyChat) -> None:
    with pytest.raises(AssertionError):
        await SUITE.test_post_returns_a_ref_that_edit_accepts(make_harness(toy, EditReposts))


async def test_catches_a_provider_that_connects_when_built(toy: FakeToyChat) -> None:
    with pytest.raises(AssertionError, match="must not contact"):
        await SUITE.test_declares_without_connecting(make_harness(toy, ConnectsEagerly))


async def test_catches_an_edit_that_reaches_the_platform_without_support(
    toy: FakeToyChat,
) -> None:
    with pytest.raises(pytest.fail.Exception, match="DID NOT RAISE"):
        await SUITE.test_edit_without_support_is_refused(make_harness(toy, ClaimsNoEditButEdits))


def test_catches_settings_without_descriptions(toy: FakeToyChat) -> None:
    class Options(BaseModel):  # a nested table: no docstring, one key undescribed
        model_config = ConfigDict(use_attribute_docstrings=True)

        verbose: bool = False

    class TerseSettings(ToySettings):
        """ToySettings plus a table nobody described."""

        options: Options = Options()

    harness = make_harness(toy, ToyProvider)
    harness.provider_type = dataclasses.replace(harness.provider_type, settings_model=TerseSettings)
    with pytest.raises(AssertionError, match="document the settings") as caught:
        SUITE.test_settings_are_documented(harness)
    message = str(caught.value)
    assert "TerseSettings.options (no description)" in message
    assert "Options.verbose (no description)" in message
    assert "Options (no docstring)" in message
    assert "token" not in message, "the toy's own keys are described"


def test_harness_build_validates_settings(toy: FakeToyChat) -> None:
    harness = make_harness(toy, ToyProvider)
    harness.settings = {"token": TOKEN}
    with pytest.raises(ValueError, match="api_base_url"):
        harness.build()


@pytest.mark.parametrize("kind", [Inbound.BOT, Inbound.SELF])
async def test_catches_a_provider_that_forwards_bot_messages(
    toy: FakeToyChat, kind: Inbound
) -> None:
    with pytest.raises(AssertionError, match="reached the core"):
        await SUITE.test_inbound_bots_self_and_forgeries_never_reach_the_sink(
            make_harness(toy, ForwardsBots), kind
        )


async def test_catches_unstable_inbound_ids(toy: FakeToyChat) -> None:
    with pytest.raises(AssertionError, match="same message_id"):
        await SUITE.test_inbound_user_message_reaches_the_sink_once_per_message(
            make_harness(toy, FreshIdsOnRedelivery)
        )
