"""The Teams provider: Bot Connector sends through ``TeamsTransport``, inbound over HTTP.

Outbound, each send needs a conversation reference (service URL, conversation, bot, tenant). The
provider keeps the latest one per channel in the core's key-value store, learned from inbound
activities (and installs), so proactive sends work after a restart; without one it builds a
reference from ``service_url`` and the channel id. Replies in a channel thread go to the reply
chain ``<channel>;messageid=<root>``.

Inbound, ``http_routes`` serves the Bot Framework messaging endpoint: the JWT is validated
(``bridge_teams.auth``) before anything else; ``insecure_skip_token_validation`` turns that off
for local development only and is never the default.
"""

from __future__ import annotations

import copy
import html
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import anyio
from botbuilder.schema import Activity, ConversationReference

from bridge_core import (
    ChatProvider,
    HttpRequest,
    HttpResponse,
    HttpRoute,
    InboundSink,
    KeyValueStore,
    MessageRef,
    MessageRejected,
    ProviderError,
    TransportError,
    Unreachable,
    find_invalid_text,
    json_may_hold_invalid_text,
    mapped_call,
    measure,
    neutralise_mass_mentions,
    valid_json,
)
from bridge_teams.activity_json import inbound_from_plain, read_plain
from bridge_teams.auth import (
    InvalidToken,
    KeySource,
    OpenIdKeys,
    TokenValidator,
)
from bridge_teams.errors import Operation, map_exception
from bridge_teams.inbound import (
    ReferenceStore,
    conversation_id,
    inbound_from_activity,
    split_conversation_id,
)
from bridge_teams.settings import CAPABILITIES, MAX_LENGTH, TeamsSettings
from bridge_teams.transport import (
    ClientCredentials,
    ConnectorTransport,
    ReferenceDefaults,
    TeamsTransport,
    message_activity,
)

__all__ = ["CAPABILITIES", "MAX_LENGTH", "TeamsProvider", "TeamsSettings"]

_log = logging.getLogger("bridge_teams")

T = TypeVar("T")


def default_token_url(tenant_id: str | None) -> str:
    return f"https://login.microsoftonline.com/{tenant_id or 'botframework.com'}/oauth2/v2.0/token"


class TeamsProvider(ChatProvider):
    """One Teams bot profile."""

    name = "teams"
    capabilities = CAPABILITIES

    def __init__(
        self,
        settings: TeamsSettings,
        *,
        profile: str,
        kv: KeyValueStore | None = None,
        transport: TeamsTransport | None = None,
        keys: KeySource | None = None,
        api_base_url: str | None = None,
    ) -> None:
        self._settings = settings
        self._profile = profile
        self._service_url = api_base_url or settings.service_url
        if transport is None:
            credentials = ClientCredentials(
                app_id=settings.app_id,
                password=settings.app_password.get_secret_value(),
                token_url=settings.token_url or default_token_url(settings.tenant_id),
                scope=settings.oauth_scope,
                timeout=settings.call_deadline,
            )
            transport = ConnectorTransport(credentials, timeout=settings.call_deadline)
        self._transport = transport
        self._references = ReferenceStore(kv, profile=profile)
        self._validator = TokenValidator(
            app_id=settings.app_id, keys=keys or OpenIdKeys(settings.openid_metadata_url)
        )
        if settings.insecure_skip_token_validation:
            _log.warning(
                "Teams profile %r accepts inbound requests WITHOUT token validation "
                "(insecure_skip_token_validation); never use this outside local development",
                profile,
            )

    def __repr__(self) -> str:
        return (
            f"TeamsProvider(profile={self._profile!r}, app_id={self._settings.app_id!r}, "
            f"service_url={self._service_url!r})"
        )

    # ------------------------------------------------------------------ outbound

    async def _reference(self, channel: str, thread: str | None) -> ConversationReference:
        stored = await self._references.recall(channel)
        if stored is None:
            if self._service_url is None:
                raise Unreachable(
                    f"no conversation reference for Teams channel {channel!r}: the bot learns "
                    "one when it is installed or messaged there; or set service_url"
                )
            defaults = ReferenceDefaults(
                service_url=self._service_url,
                bot_id=f"28:{self._settings.app_id}",
                tenant_id=self._settings.tenant_id,
            )
            stored = defaults.reference_for(channel)
        reference = copy.deepcopy(stored)
        reference.conversation.id = conversation_id(channel, thread)
        return reference

    def _check_length(self, text: str) -> None:
        size = measure(text, CAPABILITIES.length_unit)
        if size > MAX_LENGTH:
            raise MessageRejected(
                f"text is {size} bytes as sent (JSON-escaped), over the {MAX_LENGTH} this "
                "provider sends in one Teams message: chunk it with bridge_core.text.prepare "
                "before posting"
            )

    async def post(self, channel: str, text: str, *, thread: str | None = None) -> MessageRef:
        self._check_length(text)
        where = f"post to {conversation_id(channel, thread)}"
        reference = await self._reference(channel, thread)
        activity_id = await self._call(
            "post", where, lambda: self._transport.send(reference, message_activity(text))
        )
        if not activity_id:
            raise TransportError(f"Teams accepted the {where} but returned no activity id")
        return MessageRef(channel=channel, message_id=activity_id, thread=thread)

    async def edit(self, ref: MessageRef, text: str) -> MessageRef:
        self._check_length(text)
        where = f"edit of {ref.message_id} in {conversation_id(ref.channel, ref.thread)}"
        reference = await self._reference(ref.channel, ref.thread)
        activity = message_activity(text, activity_id=ref.message_id)
        await self._call("edit", where, lambda: self._transport.update(reference, activity))
        return ref

    async def _call(
        self, operation: Operation, where: str, action: Callable[[], Awaitable[T]]
    ) -> T:
        # One deadline for the whole call (a token fetch when one is due, the request, the one
        # resend after a refused token), as Discord's call_deadline. The transport's worker
        # thread is left to end on its own (ConnectorTransport says how and when).
        deadline = self._settings.call_deadline

        async def call() -> T:
            with anyio.fail_after(deadline):
                return await action()

        def read(exc: Exception) -> ProviderError:
            if isinstance(exc, TimeoutError):
                return TransportError(
                    f"Teams did not complete the {where} within the {deadline:g} s call_deadline"
                )
            return map_exception(exc, operation=operation, where=where)

        # mapped_call raises outside the except block: msrest's exception keeps the
        # requests.Response, whose request carries the connector token, and must not ride along
        # as __context__.
        return await mapped_call(call, read)

    def escape(self, text: str) -> str:
        # Teams renders a subset of HTML in a message's text: agent text must not bring markup
        # (<script>, <a href>, <img>, and <at>, which renders as a mention-looking pill even
        # without a mention entity). &, < and > become entities, so every tag reads as text
        # (ADR 0067); mass mentions get a zero-width space.
        return neutralise_mass_mentions(html.escape(text, quote=False))

    async def aclose(self) -> None:
        await self._transport.aclose()

    # ------------------------------------------------------------------ inbound

    def http_routes(self, sink: InboundSink) -> Sequence[HttpRoute]:
        async def messages(request: HttpRequest) -> HttpResponse:
            return await self.handle_activity(request, sink)

        return (HttpRoute("POST", self._settings.messaging_path, messages),)

    async def handle_activity(self, request: HttpRequest, sink: InboundSink) -> HttpResponse:
        """Validate and take one request from the Bot Connector."""
        not_an_activity = _NOT_AN_ACTIVITY
        try:
            body = json.loads(request.body.decode("utf-8"))
        except (ValueError, UnicodeDecodeError, RecursionError):
            return not_an_activity
        if not isinstance(body, dict):
            return not_an_activity
        # Only a \u escape can bring a lone surrogate or a NUL into the parsed body.
        invalid = find_invalid_text(body) if json_may_hold_invalid_text(request.body) else None
        if invalid is not None:
            # The connector signed it: refused, it would come back; taken with U+FFFD in place of
            # what cannot be carried (a lone surrogate, a NUL), it is answered (ADR 0070).
            _log.warning(
                "Teams profile %r: activity %s: %s %s; taken with U+FFFD in its place",
                self._profile,
                valid_json(body.get("id")),
                invalid.field,
                invalid.reason,
            )
            body = valid_json(body)
        if not self._settings.insecure_skip_token_validation:
            # Checked on the raw JSON before the (costly) SDK deserialisation, so an
            # unauthenticated request costs a JSON parse and a signature check, no more.
            try:
                await self._validator.validate(
                    request.header("Authorization"),
                    channel_id=_string(body.get("channelId")),
                    service_url=_string(body.get("serviceUrl")),
                )
            except InvalidToken as exc:
                _log.info("refused a Teams request for %r: %s", self._profile, exc.reason)
                return _json_response(401, {"error": "unauthorized"})
        plain = read_plain(body)
        if plain is not None:
            # Read straight from the JSON: a body the SDK would read to the same values.
            if plain.type is None or not plain.has_conversation or not plain.conversation_id:
                return not_an_activity
            await self._references.remember_plain(plain, body)
            channel, thread = split_conversation_id(plain.conversation_id)
            message = inbound_from_plain(
                plain, profile=self._profile, channel=channel, thread=thread
            )
        else:
            try:
                activity: Activity | None = Activity.deserialize(body)
            except (ValueError, TypeError, AttributeError):  # msrest's DeserializationError too
                return not_an_activity
            if activity is None or activity.type is None or activity.conversation is None:
                return not_an_activity
            if not activity.conversation.id:  # no channel to remember it under or answer in
                return not_an_activity
            await self._references.remember(activity)
            message = inbound_from_activity(activity, profile=self._profile)
        # Bots (the bridge itself included) are never user turns: they stop here.
        if message is not None and not message.author_is_bot:
            await sink(message)
        return _TAKEN


def _string(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _json_response(status: int, body: dict[str, str]) -> HttpResponse:
    return HttpResponse(status=status, body=json.dumps(body).encode("utf-8"))


# The endpoint's constant answers, made once (HttpResponse is frozen; its headers are never
# written to after it is made).
_NOT_AN_ACTIVITY = _json_response(400, {"error": "the body is not a Bot Framework activity"})
_TAKEN = _json_response(200, {})
