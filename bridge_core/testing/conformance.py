"""The conformance suite every provider plugin runs: a base class its tests subclass.

A provider's test module subclasses ``ProviderConformance`` and supplies one fixture,
``harness``, returning a ``ConformanceHarness``: the ``ProviderType`` under test, settings that
point it at a running fake platform, a channel the fake accepts, the secrets that must never
leak, and a hook that scripts each ``Fault`` on the fake::

    from bridge_core.testing.conformance import ConformanceHarness, Fault, ProviderConformance

    class TestSlackConformance(ProviderConformance):
        @pytest.fixture
        def harness(self, fake_slack):
            def script_fault(fault, operation):
                ...  # fake_slack.script("chat.postMessage", FakeSlack.rate_limited(30))
                return 30.0 if fault is Fault.RATE_LIMITED else None
            return ConformanceHarness(provider_type=..., settings={...}, channel="C0GENERAL",
                                      secrets=(token,), script_fault=script_fault,
                                      delivered=fake_slack.texts, request_count=fake_slack.count)

The contract it checks (the core relies on each point):

- the type declares its name, capabilities, budget and settings model without connecting;
- the settings model describes every key and documents every table, as the core's do
  (``bridge_core.testing.config_docs``): the configuration reference and a missing key's error
  show those descriptions;
- ``post`` returns a ``MessageRef`` that ``edit`` accepts, and an edit is in place;
- without edit support, ``edit`` is refused with a ``ProviderError`` that says so, sending nothing;
- ``post`` sends text as given (the core escapes and chunks with ``bridge_core.text.prepare``);
  every chunk at the declared maximum is accepted whole, and a text over it is refused with
  ``MessageRejected`` (about that message, so the channel carries on) rather than truncated or
  split behind the core's back;
- each scripted platform fault maps onto the core taxonomy (``Fault.expected``); rate limits are
  surfaced with their ``retry_after`` at once, never slept on; a fault never poisons the provider;
- every call is exactly one request at the platform, under every fault (no resend, no hidden
  wait inside the call), and a call cut off from outside (a deadline, a cancelled task) leaves
  nothing behind that holds up the next calls;
- text at the declared maximum is accepted whatever it holds (emoji, accents, control
  characters that JSON escapes, quotes), counted in the declared unit, and so is a part chunked
  with the recovery marker's room and resent marked; chunks arrive as cut, never split inside a
  grapheme cluster;
- secrets never appear in reprs, error messages, tracebacks or log records;
- ``escape`` leaves agent text unable to ping everyone;
- with an ``inbound`` driver (``http_inbound("POST", "/events", make_request)`` for providers
  that serve ``http_routes``): a person's message reaches the sink with a ``message_id`` that
  a redelivery repeats, and messages from bots, from the bridge itself and forged requests
  never reach it.
"""

from __future__ import annotations

import enum
import logging
import re
import time
import traceback
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
import pluggy
import pytest
from pydantic import BaseModel

from bridge_core import hookspecs
from bridge_core.hookspecs import ProviderContext, ProviderType
from bridge_core.ledger import MARKER_PARTIAL, marker_headroom
from bridge_core.provider import (
    Capabilities,
    ChatProvider,
    Forbidden,
    HttpRequest,
    HttpResponse,
    InboundMessage,
    InboundSink,
    MessageRef,
    MessageRejected,
    NotFound,
    ProviderError,
    RateLimited,
    SendBudget,
    TransportError,
    Unreachable,
)
from bridge_core.testing.awkward_text import AWKWARD_CHARACTERS, long_text, split_clusters
from bridge_core.testing.config_docs import (
    HOW_TO_DESCRIBE,
    undescribed_fields,
    undocumented_models,
)
from bridge_core.text import measure, prepare

__all__ = [
    "MASS_PINGS",
    "ConformanceHarness",
    "Fault",
    "Inbound",
    "InboundDriver",
    "Operation",
    "ProviderConformance",
    "http_inbound",
]

Operation = Literal["post", "edit"]


class Fault(enum.Enum):
    """A platform failure the fake can script, and the core error it must become."""

    RATE_LIMITED = "rate_limited"  # the platform's 429 with its retry-after
    NOT_FOUND = "not_found"  # the edit target is gone (scripted on edit only)
    FORBIDDEN = "forbidden"  # the bot lost access to the channel
    UNREACHABLE = "unreachable"  # permanent: channel deleted, credentials revoked
    REJECTED = "rejected"  # this message's body was refused (malformed, too long): 400, 413, 422
    SERVER_ERROR = "server_error"  # a 5xx
    DROPPED = "dropped"  # the connection closed with no response
    SLOW = "slow"  # no answer within the provider's timeout (harness sets a short one)

    @property
    def expected(self) -> type[ProviderError]:
        return _EXPECTED[self]


_EXPECTED: dict[Fault, type[ProviderError]] = {
    Fault.RATE_LIMITED: RateLimited,
    Fault.NOT_FOUND: NotFound,
    Fault.FORBIDDEN: Forbidden,
    Fault.UNREACHABLE: Unreachable,
    Fault.REJECTED: MessageRejected,
    Fault.SERVER_ERROR: TransportError,
    Fault.DROPPED: TransportError,
    Fault.SLOW: TransportError,
}

# A provider raising a platform's refusal answered at once takes milliseconds; an SDK's hidden
# backoff (discord.py's 1 s, then 3 s, after a 500) takes about this or longer; the margin is for
# a loaded machine.
_NO_HIDDEN_WAIT = 2.0
# How long the cut-off test lets a faulted call run before cancelling it from outside.
_CUT_OFF_AFTER = 0.3
# How long the cut-off test waits for the next three posts before calling the provider wedged
# (well past the 3 * _NO_HIDDEN_WAIT they must take; the kit's own test of a wedged provider
# shortens it, having nothing to wait for).
_WEDGED_AFTER = 10.0

# Agent text that pings a whole channel on most platforms if sent raw. Platform-specific forms
# (Slack's ``<!channel>``, ``<@U123>``) go in ``ConformanceHarness.extra_pings``.
MASS_PINGS: tuple[str, ...] = ("@everyone", "@here", "@channel", "@Everyone", "@HERE")
_MASS_PATTERN = re.compile(r"@(everyone|here|channel)\b", re.IGNORECASE)


class Inbound(enum.Enum):
    """What arrives from the platform in an inbound conformance test."""

    USER = "user"  # a person's message: must reach the sink, once per platform message
    BOT = "bot"  # another bot's message: must never reach the sink
    SELF = "self"  # the bridge's own post coming back: must never reach the sink
    FORGED = "forged"  # failed authentication (bad signature, bad token): refused


InboundDriver = Callable[
    [ChatProvider, InboundSink, Inbound, str], Awaitable["HttpResponse | None"]
]
"""Deliver one inbound ``Inbound`` kind with ``text`` to ``provider`` through its real inbound
path (``http_routes(sink)`` or ``receive(sink)``) and return once the provider has handled it,
with the HTTP answer when there is one. The same ``text`` must make the same platform message
(a redelivery), different texts different messages."""


def http_inbound(
    method: str, path: str, make_request: Callable[[Inbound, str], HttpRequest]
) -> InboundDriver:
    """An ``InboundDriver`` for providers that take inbound over ``http_routes``: builds the
    request with ``make_request`` (signed, or forged for ``Inbound.FORGED``) and calls the route
    the provider serves at ``method path``."""

    async def drive(
        provider: ChatProvider, sink: InboundSink, kind: Inbound, text: str
    ) -> HttpResponse | None:
        routes = [
            route
            for route in provider.http_routes(sink)
            if route.method.upper() == method.upper() and route.path == path
        ]
        assert routes, f"{provider.name} serves no {method} {path} route"
        return await routes[0].handler(make_request(kind, text))

    return drive


ScriptFault = Callable[[Fault, Operation], "float | None"]
"""Script the fake so the provider's next ``operation`` fails with ``fault``; return the
retry-after (seconds) the platform announced for ``RATE_LIMITED``, else ``None``."""


@dataclass(slots=True)
class ConformanceHarness:
    """How the suite builds and observes one provider against its fake platform.

    ``delivered(channel)`` returns the current texts of the bot's messages in a channel (after
    edits) as the platform stored them; ``request_count()`` counts requests the fake received.
    Both are optional (the console provider has no platform), and so is ``script_fault``: faults
    not in ``faults`` are skipped. ``extra_pings`` are platform-specific forms (``<@U123>``) that
    ``escape`` must change. ``plugin`` is the module with the ``register_providers`` hookimpl.
    ``inbound`` delivers platform messages for the inbound tests (``http_inbound`` builds one for
    HTTP routes); without it those tests are skipped.
    """

    provider_type: ProviderType[Any]
    settings: Mapping[str, Any]
    channel: str
    context: ProviderContext = field(default_factory=lambda: ProviderContext(profile="conformance"))
    secrets: Sequence[str] = ()
    script_fault: ScriptFault | None = None
    faults: frozenset[Fault] = frozenset(Fault)
    delivered: Callable[[str], list[str]] | None = None
    request_count: Callable[[], int] | None = None
    thread_for: Callable[[MessageRef], str] = lambda ref: ref.message_id
    extra_pings: Sequence[str] = ()
    plugin: object | None = None
    inbound: InboundDriver | None = None
    requests_per_call: Mapping[str, int] = field(default_factory=lambda: {"post": 1, "edit": 1})
    """Requests one ``post`` or ``edit`` makes when nothing fails: 1, or 2 for an edit that
    looks its target up first (Matrix). A faulted call makes at least one and never more."""

    def build(self) -> ChatProvider:
        """Validate the settings with the type's model and call its factory."""
        model = self.provider_type.settings_model.model_validate(dict(self.settings))
        return self.provider_type.factory(model, self.context)


def _everything_said(error: BaseException) -> str:
    return "".join(traceback.format_exception(error)) + repr(error)


class ProviderConformance:
    """The suite. Subclass it as ``Test<Platform>Conformance`` and provide ``harness``.

    Tests run on asyncio (the platform SDKs need it); override ``anyio_backend`` to change that.
    """

    pytestmark = pytest.mark.anyio

    @pytest.fixture
    def anyio_backend(self) -> str:
        return "asyncio"

    @pytest.fixture
    def harness(self) -> ConformanceHarness:
        raise NotImplementedError(
            f"{type(self).__name__} must define a `harness` fixture returning ConformanceHarness"
        )

    # ----------------------------------------------------------------- declaration

    async def test_declares_without_connecting(self, harness: ConformanceHarness) -> None:
        before = harness.request_count() if harness.request_count else 0
        kind = harness.provider_type
        assert re.fullmatch(r"[a-z][a-z0-9_-]*", kind.name), f"bad provider name {kind.name!r}"
        assert isinstance(kind.capabilities, Capabilities)
        assert kind.capabilities.max_length >= 1
        assert isinstance(kind.budget, SendBudget)
        assert issubclass(kind.settings_model, BaseModel)
        async with harness.build() as provider:
            assert provider.name == kind.name
            assert provider.capabilities == kind.capabilities
        after = harness.request_count() if harness.request_count else 0
        assert after == before, "building the provider must not contact the platform"

    def test_settings_are_documented(self, harness: ConformanceHarness) -> None:
        # The configuration reference and a missing key's error show these texts (ADR 0062).
        model = harness.provider_type.settings_model
        missing = [f"{name} (no description)" for name in undescribed_fields(model)]
        missing += [f"{name} (no docstring)" for name in undocumented_models(model)]
        assert missing == [], f"document the settings: {missing}; {HOW_TO_DESCRIBE}"

    def test_registers_through_the_hook(self, harness: ConformanceHarness) -> None:
        if harness.plugin is None:
            pytest.skip("harness.plugin not given")
        manager = pluggy.PluginManager(hookspecs.PROJECT_NAME)
        manager.add_hookspecs(hookspecs)
        manager.register(harness.plugin)
        manager.check_pending()
        registered: list[ProviderType[Any]] = []
        manager.hook.register_providers(register=registered.append)
        names = [kind.name for kind in registered]
        assert harness.provider_type.name in names

    # ----------------------------------------------------------------- post and edit

    async def test_post_returns_a_ref_that_edit_accepts(self, harness: ConformanceHarness) -> None:
        async with harness.build() as provider:
            ref = await provider.post(harness.channel, "first version")
            assert isinstance(ref, MessageRef)
            assert ref.message_id
            if not provider.capabilities.edit:
                return
            edited = await provider.edit(ref, "second version")
            assert isinstance(edited, MessageRef)
            assert (edited.channel, edited.message_id) == (ref.channel, ref.message_id)
            if harness.delivered is not None:
                texts = harness.delivered(harness.channel)
                assert "second version" in texts
                assert "first version" not in texts, "an edit must change the message in place"

    async def test_edit_without_support_is_refused(self, harness: ConformanceHarness) -> None:
        async with harness.build() as provider:
            if provider.capabilities.edit:
                pytest.skip("the provider supports edits")
            ref = await provider.post(harness.channel, "cannot be edited")
            before = harness.request_count() if harness.request_count else 0
            with pytest.raises(ProviderError, match="edit"):
                await provider.edit(ref, "edited")
            after = harness.request_count() if harness.request_count else 0
            assert after == before, "a refused edit must not reach the platform"

    async def test_post_in_a_thread(self, harness: ConformanceHarness) -> None:
        async with harness.build() as provider:
            if not provider.capabilities.threads:
                pytest.skip("the provider declares no threads")
            root = await provider.post(harness.channel, "thread root")
            thread = harness.thread_for(root)
            reply = await provider.post(harness.channel, "thread reply", thread=thread)
            assert isinstance(reply, MessageRef)
            assert reply.thread == thread

    # ----------------------------------------------------------------- length

    async def test_chunks_at_the_declared_maximum_are_accepted(
        self, harness: ConformanceHarness
    ) -> None:
        async with harness.build() as provider:
            caps = provider.capabilities
            text = long_text(min(2 * caps.max_length + 17, 200_000), caps.length_unit)
            pieces = prepare(
                text, escape=provider.escape, max_length=caps.max_length, unit=caps.length_unit
            )
            assert len(pieces) >= 2 or measure(text, caps.length_unit) <= caps.max_length
            exact = "a" * caps.max_length
            for piece in [*pieces, exact]:
                assert measure(piece, caps.length_unit) <= caps.max_length
                await provider.post(harness.channel, piece)
            if harness.delivered is not None:
                delivered = harness.delivered(harness.channel)[-len(pieces) - 1 :]
                split = split_clusters(delivered[:-1])
                assert split == [], f"a message boundary splits a grapheme cluster: {split}"
                assert delivered == [*pieces, exact], (
                    "every chunk must arrive whole and unaltered (post must not escape again)"
                )

    async def test_text_at_the_maximum_is_accepted_whatever_it_holds(
        self, harness: ConformanceHarness
    ) -> None:
        # The declared unit must be the platform's: text as long as it allows, made of characters
        # that count differently in other units or grow on the wire (JSON's \u001b, surrogate
        # pairs), is accepted whole. A provider declaring characters where the platform counts
        # bytes, or UTF-8 bytes where it counts the escaped JSON, fails here.
        async with harness.build() as provider:
            caps = provider.capabilities
            for character in AWKWARD_CHARACTERS:
                count = caps.max_length // measure(character, caps.length_unit)
                text = character * count
                try:
                    await provider.post(harness.channel, text)
                except ProviderError as exc:
                    raise AssertionError(
                        f"{count} x {character!r} ({measure(text, caps.length_unit)} "
                        f"{caps.length_unit.value}, within the declared {caps.max_length}) was "
                        f"refused: {exc!r}; declare the unit the platform counts"
                    ) from None
                if harness.delivered is not None:
                    assert text in harness.delivered(harness.channel)

    async def test_a_part_resent_with_the_marker_still_fits(
        self, harness: ConformanceHarness
    ) -> None:
        # The runtime leaves marker_headroom(unit) free in each part, so a part the ledger
        # resends after "♻️ Recovered reply — …" must still be accepted (counted in the unit).
        async with harness.build() as provider:
            caps = provider.capabilities
            room = caps.max_length - marker_headroom(caps.length_unit)
            if room < 1:
                pytest.skip("max_length leaves no room beside the recovery marker")
            for character in ("é", "😀", "a"):
                count = room // measure(character, caps.length_unit)
                marked = f"{MARKER_PARTIAL}\n{character * count}"
                assert measure(marked, caps.length_unit) <= caps.max_length
                await provider.post(harness.channel, marked)

    async def test_over_long_text_is_refused(self, harness: ConformanceHarness) -> None:
        async with harness.build() as provider:
            caps = provider.capabilities
            over = "a" * (caps.max_length + 1)
            with pytest.raises(ProviderError) as caught:
                await provider.post(harness.channel, over)
            assert isinstance(caught.value, MessageRejected), (
                f"over-long text raised {caught.value!r}; refuse it with MessageRejected, which "
                "drops that message and keeps the channel (Unreachable would give it up)"
            )
            if harness.delivered is not None:
                assert over not in harness.delivered(harness.channel)
                assert all(
                    measure(t, caps.length_unit) <= caps.max_length
                    for t in harness.delivered(harness.channel)
                )

    # ----------------------------------------------------------------- faults

    @pytest.mark.parametrize("operation", ["post", "edit"])
    @pytest.mark.parametrize("fault", list(Fault), ids=lambda f: f.value)
    async def test_fault_maps_onto_the_taxonomy(
        self, harness: ConformanceHarness, fault: Fault, operation: Operation
    ) -> None:
        if harness.script_fault is None or fault not in harness.faults:
            pytest.skip(f"the harness does not script {fault.value}")
        if fault is Fault.NOT_FOUND and operation == "post":
            pytest.skip("a missing message is an edit fault")
        async with harness.build() as provider:
            if operation == "edit" and not provider.capabilities.edit:
                pytest.skip("the provider does not edit")
            ref = await provider.post(harness.channel, "before the fault")
            retry_after = harness.script_fault(fault, operation)
            before = harness.request_count() if harness.request_count else 0
            started = time.monotonic()
            error: ProviderError | None = None
            try:
                if operation == "post":
                    await provider.post(harness.channel, "during the fault")
                else:
                    await provider.edit(ref, "during the fault")
            except ProviderError as exc:
                error = exc
            elapsed = time.monotonic() - started
            if harness.request_count is not None:
                sent = harness.request_count() - before
                most = harness.requests_per_call.get(operation, 1)
                assert 1 <= sent <= most, (
                    f"{fault.value} on {operation}: the platform saw {sent} requests for one "
                    f"call (it makes {most}); resending is the core's decision (the ledger and "
                    "the sender pace it)"
                )
            assert error is not None, f"{fault.value} on {operation} raised no ProviderError"
            assert isinstance(error, fault.expected), (
                f"{fault.value} on {operation} raised {error!r}, expected {fault.expected.__name__}"
            )
            if fault is Fault.RATE_LIMITED:
                assert isinstance(error, RateLimited)
                assert error.retry_after == retry_after
                assert retry_after is None or elapsed < retry_after / 2, (
                    f"the provider slept {elapsed:.1f} s on a rate limit instead of surfacing it"
                )
            if fault is not Fault.SLOW:
                assert elapsed < _NO_HIDDEN_WAIT, (
                    f"{fault.value} on {operation} took {elapsed:.2f} s: the provider waited "
                    "inside the call instead of raising at once"
                )
            # A fault must not poison the provider (a broken pooled connection, a stuck flag).
            await provider.post(harness.channel, "after the fault")

    @pytest.mark.parametrize(
        "fault", [Fault.RATE_LIMITED, Fault.SERVER_ERROR, Fault.SLOW], ids=lambda f: f.value
    )
    async def test_a_call_cut_off_leaves_nothing_behind(
        self, harness: ConformanceHarness, fault: Fault
    ) -> None:
        # A call the core gives up on (its deadline, a cancelled task) while the provider or its
        # SDK waits must not leave a lock held or a bucket empty: the next calls go out at once.
        if harness.script_fault is None or fault not in harness.faults:
            pytest.skip(f"the harness does not script {fault.value}")
        async with harness.build() as provider:
            await provider.post(harness.channel, "before the cut")
            harness.script_fault(fault, "post")
            with anyio.move_on_after(_CUT_OFF_AFTER):
                try:
                    await provider.post(harness.channel, "cut off")
                except ProviderError:
                    pass  # raising at once is fine too; the point is what the next calls see
            before = harness.request_count() if harness.request_count else 0
            started = time.monotonic()
            with anyio.move_on_after(_WEDGED_AFTER) as stuck:
                for n in range(3):
                    await provider.post(harness.channel, f"after the cut {n}")
            assert not stuck.cancelled_caught, (
                f"after a call cut off during {fault.value}, the next posts were still waiting "
                f"{_WEDGED_AFTER:g} s later: the provider (or its SDK) was left wedged"
            )
            elapsed = time.monotonic() - started
            if harness.request_count is not None:
                assert harness.request_count() - before == 3
            assert elapsed < 3 * _NO_HIDDEN_WAIT, f"the next three posts took {elapsed:.2f} s"

    # ----------------------------------------------------------------- secrets and escaping

    async def test_secrets_never_leak(
        self, harness: ConformanceHarness, caplog: pytest.LogCaptureFixture
    ) -> None:
        secrets = [s for s in harness.secrets if s]
        if not secrets:
            pytest.skip("the harness names no secrets")
        caplog.set_level(logging.DEBUG)
        said: list[str] = []
        provider = harness.build()
        said += [repr(provider), str(provider), repr(harness.context)]
        model = harness.provider_type.settings_model.model_validate(dict(harness.settings))
        said += [repr(model), str(model)]
        async with provider:
            ref = await provider.post(harness.channel, "hello")
            if provider.capabilities.edit:
                await provider.edit(ref, "hello again")
            for fault in (Fault.UNREACHABLE, Fault.RATE_LIMITED, Fault.SERVER_ERROR):
                if harness.script_fault is None or fault not in harness.faults:
                    continue
                harness.script_fault(fault, "post")
                with pytest.raises(ProviderError) as caught:
                    await provider.post(harness.channel, "failing")
                said.append(_everything_said(caught.value))
        formatter = logging.Formatter()
        for record in caplog.records:
            said.append(record.getMessage())
            if record.exc_info:
                said.append(formatter.formatException(record.exc_info))
        for secret in secrets:
            for text in said:
                assert secret not in text, f"a secret leaked into: {text[:300]!r}"

    async def test_escape_prevents_mass_pings(self, harness: ConformanceHarness) -> None:
        async with harness.build() as provider:
            for ping in (*MASS_PINGS, *harness.extra_pings):
                escaped = provider.escape(f"hey {ping} look")
                assert not _MASS_PATTERN.search(escaped), f"{ping!r} survived escape: {escaped!r}"
                assert ping not in escaped, f"{ping!r} survived escape: {escaped!r}"
            assert provider.escape("plain words 123") == "plain words 123"

    async def test_aclose_twice_is_harmless(self, harness: ConformanceHarness) -> None:
        provider = harness.build()
        await provider.post(harness.channel, "then close")
        await provider.aclose()
        await provider.aclose()

    # ----------------------------------------------------------------- inbound

    async def test_inbound_user_message_reaches_the_sink_once_per_message(
        self, harness: ConformanceHarness
    ) -> None:
        if harness.inbound is None:
            pytest.skip("the harness has no inbound driver")
        received: list[InboundMessage] = []

        async def sink(message: InboundMessage) -> None:
            received.append(message)

        async with harness.build() as provider:
            for text in ("first inbound", "first inbound", "second inbound"):
                answer = await harness.inbound(provider, sink, Inbound.USER, text)
                assert answer is None or answer.status < 300, f"refused: {answer}"
        assert [m.text for m in received] == ["first inbound", "first inbound", "second inbound"]
        first, again, second = received
        assert first.message_id and first.message_id == again.message_id, (
            "a redelivered platform message must carry the same message_id (the core dedups)"
        )
        assert second.message_id != first.message_id
        assert not any(m.author_is_bot for m in received)

    @pytest.mark.parametrize(
        "kind", [Inbound.BOT, Inbound.SELF, Inbound.FORGED], ids=lambda k: k.value
    )
    async def test_inbound_bots_self_and_forgeries_never_reach_the_sink(
        self, harness: ConformanceHarness, kind: Inbound
    ) -> None:
        if harness.inbound is None:
            pytest.skip("the harness has no inbound driver")
        received: list[InboundMessage] = []

        async def sink(message: InboundMessage) -> None:
            received.append(message)

        async with harness.build() as provider:
            answer = await harness.inbound(provider, sink, kind, f"{kind.value} says hi")
        assert received == [], f"a {kind.value} message reached the core: {received}"
        if kind is Inbound.FORGED and answer is not None:
            assert 400 <= answer.status < 500, f"a forged request was answered {answer.status}"
