"""The Slack provider: posts and edits through slack-sdk's ``AsyncWebClient``.

The client is built with ``retry_handlers=[]``: slack-sdk would otherwise resend after a
connection error (a possible duplicate the ledger never sees) and, with the rate-limit handler,
sleep inside the call. Every failure is raised at once as a core error (``bridge_slack.errors``)
and the core's sender paces and resends (ADR 0043).

``post`` sends the text it is given: the core has already escaped it with ``escape`` and chunked
it at ``capabilities.max_length`` (``bridge_core.text.prepare``). A text over that maximum is
refused here, before any request, rather than truncated (ADR 0041 explains the 3,900).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any, cast

import aiohttp
import anyio
import anyio.lowlevel
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient

from bridge_core import (
    ChatProvider,
    HttpRoute,
    InboundMessage,
    InboundSink,
    KeyValueStore,
    MessageRef,
    MessageRejected,
    ProviderError,
    TransportError,
    Unreachable,
    mapped_call,
    neutralise_mass_mentions,
)
from bridge_slack.backfill import Positions
from bridge_slack.errors import map_error
from bridge_slack.events import SlackEvents
from bridge_slack.receiver import UNREADABLE, Receiver
from bridge_slack.settings import (
    CAPABILITIES,
    DEFAULT_API_BASE,
    MAX_LENGTH,
    SlackSettings,
)
from bridge_slack.socket_mode import SlackSocketMode

__all__ = [
    "DEFAULT_API_BASE",
    "CAPABILITIES",
    "MAX_LENGTH",
    "SlackProvider",
    "SlackSettings",
    "escape_slack",
]

logger = logging.getLogger("bridge_slack")

_PROBE_TOLERATES = frozenset({"channel_not_found", "missing_scope"})
_HISTORY_TOLERATES = frozenset(UNREADABLE)


def escape_slack(text: str) -> str:
    """Agent text made inert for Slack's ``mrkdwn``.

    ``&``, ``<`` and ``>`` become entities, which leaves no ``<!channel>``, ``<!here>``,
    ``<!everyone>``, ``<@U…>`` or ``<!subteam^…>`` token for Slack to expand; a bare
    ``@channel`` (expanded by clients with ``link_names``) gets a zero-width space.
    """
    escaped = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return neutralise_mass_mentions(escaped)


class _NoRedirects:
    """The provider's session as slack-sdk uses it (``request`` and ``closed``), with redirects
    off: aiohttp follows a 307 or 308 by sending the POST again, a second request at Slack. A
    redirect comes back as an answer, which ``map_error`` reads as a ``TransportError``."""

    __slots__ = ("_session",)

    def __init__(self, session: aiohttp.ClientSession) -> None:
        self._session = session

    @property
    def closed(self) -> bool:
        return self._session.closed

    def request(self, method: str, url: str, **kwargs: Any) -> Any:
        return self._session.request(method, url, allow_redirects=False, **kwargs)


class SlackProvider(ChatProvider):
    """One Slack bot profile. Build it through the plugin's factory or directly with settings."""

    name = "slack"
    capabilities = CAPABILITIES

    def __init__(
        self,
        settings: SlackSettings,
        *,
        profile: str = "slack",
        kv: KeyValueStore | None = None,
        api_base_url: str | None = None,
    ) -> None:
        self._settings = settings
        self._profile = profile
        self._kv = kv  # where the channels' read-back positions are kept
        self._receiver = Receiver(profile=profile, own_ids=self.own_ids)
        base = api_base_url or settings.api_base_url
        self._base_url = base if base.endswith("/") else base + "/"
        self._session: aiohttp.ClientSession | None = None
        self._client: AsyncWebClient | None = None
        self._bot_user_id: str | None = settings.bot_user_id
        self._bot_id: str | None = None
        self._identity_tried = False

    def __repr__(self) -> str:
        return f"SlackProvider(profile={self._profile!r}, api_base_url={self._base_url!r})"

    # ----------------------------------------------------------------- the client

    def session(self) -> aiohttp.ClientSession:
        """The provider's aiohttp session, made on first use (it belongs to the running loop)."""
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self._settings.timeout)
            )
            # aiohttp sends a GET (conversations.info) again by itself when a kept-alive
            # connection drops; one request per call (its own test_utils turns this off too)
            self._session._retry_connection = False
            self._client = None
        return self._session

    def _web(self) -> AsyncWebClient:
        if self._client is None or self._session is None or self._session.closed:
            self._client = AsyncWebClient(
                token=self._settings.bot_token.get_secret_value(),
                base_url=self._base_url,
                session=cast(aiohttp.ClientSession, _NoRedirects(self.session())),
                timeout=int(max(1, self._settings.timeout)),
                retry_handlers=[],
            )
        return self._client

    async def _call(
        self,
        method: str,
        channel: str | None,
        /,
        *,
        tolerate: frozenset[str] = frozenset(),
        client: AsyncWebClient | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """Call a Web API method; every failure comes out as a core ``ProviderError``, except
        the error codes in ``tolerate``, which come back as Slack's ``{"ok": false}`` data.
        ``client`` defaults to the bot-token client."""
        web = client if client is not None else self._web()

        async def call() -> dict[str, Any]:
            try:
                if method == "conversations.info":
                    response = await web.conversations_info(**kwargs)
                elif method == "conversations.history":
                    # a read method: its arguments go in the query, as slack-sdk sends them
                    response = await web.conversations_history(**kwargs)
                elif method == "auth.test":
                    response = await web.auth_test()
                else:
                    response = await web.api_call(method, json=kwargs)
            except SlackApiError as exc:
                refusal = exc.response.data if isinstance(exc.response.data, dict) else {}
                if refusal.get("error") in tolerate:
                    return dict(refusal)
                raise  # read below, outside this block
            data = response.data
            if not isinstance(data, dict):
                raise TransportError(f"Slack {method}: the answer was not a JSON object")
            return data

        def read(exc: Exception) -> ProviderError | None:
            if isinstance(exc, SlackApiError):
                return map_error(
                    status=int(exc.response.status_code),
                    body=exc.response.data,
                    headers=exc.response.headers,
                    where=f"Slack {method}" + (f" to channel {channel}" if channel else ""),
                )
            if isinstance(exc, TimeoutError):
                return TransportError(
                    f"Slack {method}: no answer within {self._settings.timeout:g} s (timeout)"
                )
            if isinstance(exc, (aiohttp.ClientError, SlackClientError)):
                return TransportError(f"Slack {method}: {type(exc).__name__}: {exc}")
            return None

        # mapped_call raises the core error outside the except block, so no SDK exception
        # (holding the request's headers) is chained to it as __context__.
        return await mapped_call(call, read)

    # ----------------------------------------------------------------- outbound

    def _refuse_over_long(self, text: str) -> None:
        if len(text) > MAX_LENGTH:
            raise MessageRejected(
                f"Slack text of {len(text)} characters is over the declared maximum of "
                f"{MAX_LENGTH}: chunk it with bridge_core.text.prepare first"
            )

    async def post(self, channel: str, text: str, *, thread: str | None = None) -> MessageRef:
        self._refuse_over_long(text)
        params: dict[str, Any] = {"channel": channel, "text": text, "link_names": False}
        if not self._settings.unfurl:
            params.update(unfurl_links=False, unfurl_media=False)
        if thread is not None:
            params["thread_ts"] = thread
        data = await self._call("chat.postMessage", channel, **params)
        ts = data.get("ts")
        if not isinstance(ts, str):
            raise TransportError("Slack chat.postMessage answered ok without a message ts")
        return MessageRef(channel=str(data.get("channel") or channel), message_id=ts, thread=thread)

    async def edit(self, ref: MessageRef, text: str) -> MessageRef:
        self._refuse_over_long(text)
        await self._call(
            "chat.update",
            ref.channel,
            channel=ref.channel,
            ts=ref.message_id,
            text=text,
            link_names=False,
        )
        return ref

    # ----------------------------------------------------------------- native streaming

    async def stream_start(
        self, channel: str, text: str, *, thread: str | None = None
    ) -> MessageRef:
        """``chat.startStream`` in ``thread`` (Slack streams only in threads; the core streams
        a reply outside one by editing). One request, no SDK helper: slack-sdk's
        ``chat_stream`` buffers and sends on its own, and the core's sender must pace every
        call."""
        self._refuse_over_long(text)
        if thread is None:
            raise MessageRejected("Slack's chat.startStream needs a thread_ts; post instead")
        data = await self._call(
            "chat.startStream", channel, channel=channel, thread_ts=thread, markdown_text=text
        )
        ts = data.get("ts")
        if not isinstance(ts, str):
            raise TransportError("Slack chat.startStream answered ok without a message ts")
        return MessageRef(channel=str(data.get("channel") or channel), message_id=ts, thread=thread)

    async def stream_append(self, ref: MessageRef, text: str) -> MessageRef:
        """``chat.appendStream``: ``text`` is appended to what the message shows."""
        self._refuse_over_long(text)
        await self._call(
            "chat.appendStream",
            ref.channel,
            channel=ref.channel,
            ts=ref.message_id,
            markdown_text=text,
        )
        return ref

    async def stream_stop(self, ref: MessageRef, text: str) -> MessageRef:
        """``chat.stopStream``, appending ``text`` first when there is any."""
        self._refuse_over_long(text)
        params: dict[str, Any] = {"channel": ref.channel, "ts": ref.message_id}
        if text:
            params["markdown_text"] = text
        await self._call("chat.stopStream", ref.channel, **params)
        return ref

    async def probe(self, channel: str) -> bool | None:
        """``conversations.info``: False when the channel is gone or archived, True when the bot
        is a member, ``None`` when it cannot tell (not a member of a public channel, which
        ``chat:write.public`` may still allow, or no ``channels:read`` scope)."""
        data = await self._call(
            "conversations.info", channel, tolerate=_PROBE_TOLERATES, channel=channel
        )
        if data.get("error") == "channel_not_found":
            return False
        info = data.get("channel")
        if not isinstance(info, dict):
            return None
        if info.get("is_archived"):
            return False
        if info.get("is_member"):
            return True
        return None

    def escape(self, text: str) -> str:
        return escape_slack(text)

    # ----------------------------------------------------------------- identity and inbound

    def own_ids(self) -> tuple[str | None, str | None]:
        """The bridge's ``(user_id, bot_id)`` as far as known, without asking Slack."""
        return self._bot_user_id, self._bot_id or None

    async def learn_identity(self) -> None:
        """Ask ``auth.test`` for the bridge's own ids once, so its own posts coming back as
        events are recognised even without ``bot_user_id``; a failure is not retried (the
        ``bot_id`` that Slack puts on every bot post still filters them)."""
        if self._identity_tried or self._bot_id is not None:
            return
        self._identity_tried = True
        try:
            await self.identity()
        except ProviderError as exc:
            logger.warning("Slack profile %s: auth.test failed (%s)", self._profile, exc)

    async def identity(self) -> tuple[str | None, str | None]:
        """The bridge's own ``(user_id, bot_id)`` in the workspace, from ``auth.test`` once."""
        if self._bot_id is None:
            data = await self._call("auth.test", None)
            user_id, bot_id = data.get("user_id"), data.get("bot_id")
            self._bot_user_id = self._bot_user_id or (user_id if isinstance(user_id, str) else None)
            self._bot_id = bot_id if isinstance(bot_id, str) else ""
        return self._bot_user_id, self._bot_id or None

    async def open_socket_url(self) -> str:
        """A fresh Socket Mode websocket URL from ``apps.connections.open`` (app token)."""
        if self._settings.app_token is None:
            raise Unreachable(f"Slack profile {self._profile!r} has no app_token for Socket Mode")
        client = AsyncWebClient(
            token=self._settings.app_token.get_secret_value(),
            base_url=self._base_url,
            session=cast(aiohttp.ClientSession, _NoRedirects(self.session())),
            retry_handlers=[],
        )
        data = await self._call("apps.connections.open", None, client=client)
        url = data.get("url")
        if not isinstance(url, str) or not url.startswith(("ws://", "wss://")):
            raise TransportError("Slack apps.connections.open answered ok without a websocket URL")
        return url

    async def receive(self, sink: InboundSink) -> None:
        """With ``socket_mode``, take events over Slack's Socket Mode until cancelled (raises
        ``ConnectionLost`` when the socket drops). Over HTTP the events come to
        ``http_routes``; ``receive`` returns at once, unless it reads back (below).

        With ``backfill`` and the core's key-value store, the channels people wrote in are
        read back from where the last run left them (``bridge_slack.receiver``), and their
        positions kept up to date until cancelled, on either path; a refused token raises
        ``Unreachable``."""
        if self._settings.backfill and self._kv is not None:
            self._receiver.expect()  # before any await: a live event waits for the positions
        positions: Positions | None = None
        try:
            positions = await self._positions()
        finally:
            self._receiver.start(positions)  # even when cancelled: nothing waits for ever
        connected = anyio.Event() if self._settings.socket_mode else None
        if self._settings.socket_mode:
            socket = SlackSocketMode(
                self,
                sink,
                profile=self._profile,
                heartbeat=self._settings.socket_ping_interval,
                hello_timeout=self._settings.timeout,
                connected=connected,
            )
            inbound = socket.run
        elif positions is not None:
            await self.learn_identity()  # the read-back tells the bridge's own posts apart
            inbound = anyio.sleep_forever
        else:
            return
        if positions is None:
            await inbound()
            return
        ended: list[ProviderError] = []
        async with anyio.create_task_group() as tasks:

            async def until_ended(run: Callable[[], Awaitable[object]]) -> None:
                try:
                    await run()
                except ProviderError as exc:  # raised below, on its own rather than in a group
                    ended.append(exc)
                    tasks.cancel_scope.cancel()

            tasks.start_soon(
                until_ended, partial(self._receiver.run, sink, self._history, connected=connected)
            )
            await until_ended(inbound)
            tasks.cancel_scope.cancel()
        await anyio.lowlevel.checkpoint_if_cancelled()  # cancelled, not lost, if both
        if ended:
            raise ended[0]

    async def take(self, message: InboundMessage, sink: InboundSink) -> None:
        """A live message from either inbound path, into ``sink`` in its channel's order (held
        while its channel's gap is read); raises what the sink raised."""
        await self._receiver.live(message, sink)

    async def _history(self, channel: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """One ``conversations.history`` request, made like every other call: once, its
        failure a core error (a 429 is ``RateLimited``, which the receiver waits out). The
        channel's own refusals come back as Slack's data."""
        return await self._call(
            "conversations.history",
            channel,
            tolerate=_HISTORY_TOLERATES,
            channel=channel,
            **arguments,
        )

    async def _positions(self) -> Positions | None:
        if not self._settings.backfill:
            return None
        if self._kv is None:
            # The gateway always lends a store; only a provider built by hand has none. Said per
            # instance: a process-wide "said once" would be state kept at import.
            logger.warning(
                "Slack profile %s: no key-value store was given, so messages sent while inbound "
                "is down are not read back",
                self._profile,
            )
            return None
        positions = Positions(self._kv, profile=self._profile)
        return positions if await positions.load() else None

    def http_routes(self, sink: InboundSink) -> Sequence[HttpRoute]:
        """The Events API endpoint (``settings.events_path``); none without a signing secret,
        since unsigned events are never accepted, and none in Socket Mode."""
        if self._settings.signing_secret is None or self._settings.socket_mode:
            return ()
        if self._settings.backfill and self._kv is not None:
            self._receiver.expect()  # events wait for receive's positions, not past a gap
        return (SlackEvents(self, sink, settings=self._settings, profile=self._profile).route(),)

    async def aclose(self) -> None:
        session, self._session, self._client = self._session, None, None
        if session is not None and not session.closed:
            await session.close()
