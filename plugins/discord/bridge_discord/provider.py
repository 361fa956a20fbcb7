"""The Discord provider: REST sends of its own (``bridge_discord.rest``), inbound through
discord.py's gateway.

Each post, edit and probe is exactly one HTTP request under one deadline (``call_deadline``): a
429 surfaces at once as ``RateLimited`` with Discord's retry-after, a 5xx or a lost connection as
``TransportError``, and the core's sender, not an SDK, decides what waits and what is resent
(ADR 0066). A call cut off by the deadline leaves nothing behind, so the next one goes out.
Every create carries a ``nonce`` with ``enforce_nonce``: Discord answers a create whose nonce it
saw from the bot in the past few minutes with that first message instead of posting a second.
A ledger reply's part takes its nonce from the core's ``post_key()`` (``nonce``), so the ledger's
own resend of a part whose answer was lost finds the first message; other posts take a fresh one.
"""

from __future__ import annotations

import hashlib
import logging
import re
import secrets
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlencode

import anyio
import discord

from bridge_core import (
    ChatProvider,
    ConnectionLost,
    Forbidden,
    InboundSink,
    KeyValueStore,
    MessageRef,
    MessageRejected,
    NotFound,
    ProviderError,
    RateLimited,
    TransportError,
    Unreachable,
    mapped_call,
    measure,
    neutralise_mass_mentions,
    parse_retry_after,
    post_key,
)
from bridge_discord.backfill import ChannelGone, Positions
from bridge_discord.client import BridgeClient
from bridge_discord.errors import is_global_limit, map_error, map_exception
from bridge_discord.inbound import snowflake
from bridge_discord.receiver import Receiver
from bridge_discord.rest import DiscordRest
from bridge_discord.settings import CAPABILITIES, MAX_LENGTH, DiscordSettings

__all__ = ["CAPABILITIES", "MAX_LENGTH", "DiscordProvider", "DiscordSettings"]

log = logging.getLogger("bridge_discord")

_SLACK_MASS = re.compile(r"<!(?=(everyone|here|channel)\b)", re.IGNORECASE)

_GATEWAY_AUTH_FAILED = 4004
_GATEWAY_BAD_INTENTS = (4013, 4014)
_INTENTS_ADVICE = (
    "Discord refused the gateway intents: enable the message-content intent for the bot in "
    "the developer portal, or set message_content_intent = false"
)

# discord.py refuses anything shorter. Only the gateway's login goes through discord.py's HTTP
# client now, under our own deadline.
_SDK_MIN_RATELIMIT_TIMEOUT = 30.0
_NO_MENTIONS: dict[str, Any] = {"parse": []}

_READ_RATE_LIMITS = 5  # 429s in a row on one request before the run ends as ConnectionLost
_READ_DEFAULT_WAIT = 5.0  # seconds, when a 429 says no usable retry-after


class _GlobalLimit(RateLimited):
    """A read-back request met Discord's global limit (``is_global_limit``): the whole bot
    waits, not one route."""


def _read_error(*, status: int, body: Any, headers: Any, where: str) -> ProviderError:
    """A refused read-back request (a channel's messages, or the channel): 404 (Unknown
    Channel, 10003) and any request that can never work for this channel end that channel's
    backfill, not every channel's; a refused token (401) is still ``Unreachable``."""
    error = map_error(status=status, body=body, headers=headers, where=where)
    if isinstance(error, RateLimited) and is_global_limit(body=body, headers=headers):
        return _GlobalLimit(str(error), retry_after=error.retry_after)
    if status == 404 or (status != 401 and isinstance(error, (Unreachable, MessageRejected))):
        return ChannelGone(str(error))
    return error


def nonce(key: str) -> str:
    """The create's nonce for the idempotency ``key`` (25 characters, Discord's most): the same
    key gives the same nonce in every process, so Discord recognises a resend."""
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:25]


class DiscordProvider(ChatProvider):
    """One Discord bot profile. Logs in lazily on first use; ``aclose`` releases the session."""

    name = "discord"
    capabilities = CAPABILITIES

    def __init__(
        self,
        settings: DiscordSettings,
        *,
        profile: str,
        kv: KeyValueStore | None = None,
        api_base_url: str | None = None,
    ) -> None:
        self._settings = settings
        self._profile = profile
        self._kv = kv
        self._base_url = (api_base_url or settings.api_base_url).rstrip("/")
        self._client: BridgeClient | None = None
        self._lock = anyio.Lock()
        # (route, channel id) -> when (anyio's clock) that read-back bucket refills, once a read
        # drained it; and when a global 429 met by the read-back has passed
        self._read_refill: dict[tuple[str, int], float] = {}
        self._reads_resume_at = 0.0
        self._rest = DiscordRest(
            base_url=self._base_url,
            token=settings.token.get_secret_value(),
            timeout=settings.call_deadline,
        )

    def __repr__(self) -> str:
        return f"DiscordProvider(profile={self._profile!r}, api_base_url={self._base_url!r})"

    # ------------------------------------------------------------------ lifecycle

    def _intents(self) -> discord.Intents:
        if not self._settings.inbound:
            return discord.Intents.none()
        intents = discord.Intents.none()
        intents.guilds = True
        intents.guild_messages = True
        intents.dm_messages = True
        intents.message_content = self._settings.message_content_intent
        return intents

    async def _ready_client(self) -> BridgeClient:
        async with self._lock:
            if self._client is not None and not self._client.is_closed():
                return self._client
            client = BridgeClient(
                base_url=self._base_url,
                gateway_url=self._settings.gateway_url,
                intents=self._intents(),
                max_ratelimit_timeout=_SDK_MIN_RATELIMIT_TIMEOUT,
            )

            async def login() -> None:
                with anyio.fail_after(self._settings.call_deadline):
                    await client.login(self._settings.token.get_secret_value())

            try:
                # mapped_call raises outside the except block: discord.py's exception holds the
                # response, whose request carries the token, and must not ride along as
                # __context__.
                await mapped_call(login, lambda exc: map_exception(exc, where="login"))
            except ProviderError:
                await client.close()
                raise
            except BaseException:
                with anyio.CancelScope(shield=True):  # cancelled mid-login: still close it
                    await client.close()
                raise
            self._client = client
            return client

    async def aclose(self) -> None:
        await self._close_gateway()
        await self._rest.aclose()

    async def _close_gateway(self) -> None:
        async with self._lock:
            client, self._client = self._client, None
        if client is not None:
            await client.close()

    # ------------------------------------------------------------------ calls

    async def _call(
        self,
        method: str,
        path: str,
        *,
        where: str,
        body: dict[str, Any] | None = None,
        errors: Callable[..., ProviderError] = map_error,
        headers_to: Callable[[Mapping[str, str]], None] | None = None,
    ) -> Any:
        deadline = self._settings.call_deadline
        try:
            with anyio.fail_after(deadline):
                return await self._rest.request(
                    method, path, where=where, body=body, errors=errors, headers_to=headers_to
                )
        except TimeoutError:
            pass
        raise TransportError(f"Discord did not complete {where} within the {deadline:g} s deadline")

    @staticmethod
    def _snowflake(value: str, what: str) -> int:
        try:
            number = int(value)
        except ValueError:
            number = -1
        if number <= 0:
            raise Unreachable(f"{what} {value!r} is not a Discord id (a positive integer)")
        return number

    def _check_length(self, text: str) -> None:
        size = measure(text, CAPABILITIES.length_unit)
        if size > MAX_LENGTH:
            raise MessageRejected(
                f"text is {size} UTF-16 units, over Discord's {MAX_LENGTH}: "
                "chunk it with bridge_core.text.prepare before posting"
            )

    async def post(self, channel: str, text: str, *, thread: str | None = None) -> MessageRef:
        target = self._snowflake(thread or channel, "thread" if thread else "channel")
        self._check_length(text)
        where = f"post to {'thread' if thread else 'channel'} {target}"
        body = {
            "content": text,
            "allowed_mentions": _NO_MENTIONS,
            "nonce": nonce(key) if (key := post_key()) is not None else secrets.token_hex(12),
            "enforce_nonce": True,
        }
        try:
            message = await self._call(
                "POST", f"/channels/{target}/messages", where=where, body=body
            )
        except NotFound as exc:
            # A post has no message to lose: a 404 here means the channel itself is gone.
            gone = Unreachable(str(exc))
        else:
            message_id = message.get("id") if isinstance(message, dict) else None
            if not isinstance(message_id, str) or not message_id:
                raise TransportError(f"Discord accepted the {where} but returned no message id")
            return MessageRef(channel=channel, message_id=message_id, thread=thread)
        raise gone

    async def edit(self, ref: MessageRef, text: str) -> MessageRef:
        target = self._snowflake(ref.thread or ref.channel, "channel")
        message_id = self._snowflake(ref.message_id, "message")
        self._check_length(text)
        where = f"edit of message {message_id} in channel {target}"
        body = {"content": text, "allowed_mentions": _NO_MENTIONS}
        await self._call(
            "PATCH", f"/channels/{target}/messages/{message_id}", where=where, body=body
        )
        return ref

    async def probe(self, channel: str) -> bool | None:
        """Whether the bot can see ``channel`` (GET /channels/{id}). Seeing is not always
        sending (a read-only channel answers True); the sender's re-check send covers that."""
        target = self._snowflake(channel, "channel")
        try:
            await self._call("GET", f"/channels/{target}", where=f"probe of channel {target}")
        except (Forbidden, NotFound, Unreachable):
            return False
        return True

    def escape(self, text: str) -> str:
        # allowed_mentions=none already stops every ping; breaking @everyone/@here as well keeps
        # the text harmless if it is ever copied or sent without that guard.
        text = neutralise_mass_mentions(text)
        # Slack's <!everyone> means nothing on Discord, but agent text may be relayed onwards.
        return _SLACK_MASS.sub("<\u200b!", text)

    # ------------------------------------------------------------------ inbound

    async def receive(self, sink: InboundSink) -> None:
        """Deliver user messages from the gateway until cancelled; raise ``ConnectionLost`` when
        the gateway drops (the core's watcher builds a new provider) or ``Unreachable`` when it
        can never work (bad token, privileged intent not enabled).

        With ``backfill`` and the core's key-value store, each new session first reads back
        what the remembered channels got while no session was listening (``Receiver``); a
        channel's live messages wait for its gap.
        """
        if not self._settings.inbound:
            return
        client = await self._ready_client()
        own_id = client.user.id if client.user is not None else None
        positions = await self._positions()
        failure: ProviderError = ConnectionLost("Discord gateway closed the connection")
        early: list[ProviderError] = []
        async with anyio.create_task_group() as tasks:

            def fail(error: ProviderError) -> None:
                early.append(error)
                tasks.cancel_scope.cancel()

            receiver = Receiver(
                sink,
                profile=self._profile,
                own_user_id=own_id,
                positions=positions,
                fetch=self._history,
                last_message=self._last_message_id,
                fail=fail,
            )
            client.message_handler = receiver.handle
            client.session_handler = receiver.on_session
            try:
                if positions is not None:
                    tasks.start_soon(receiver.backfill)
                    tasks.start_soon(receiver.flush_every)
                failure = await self._connect(client)
                tasks.cancel_scope.cancel()
            finally:
                client.message_handler = None
                client.session_handler = None
                receiver.close()
                with anyio.CancelScope(shield=True):  # even when cancelled
                    with anyio.move_on_after(self._settings.call_deadline):
                        await receiver.flush()
                    await self._close_gateway()
        raise early[0] if early else failure

    async def _positions(self) -> Positions | None:
        if not self._settings.backfill:
            return None
        if self._kv is None:
            # The gateway always lends a store; only a provider built by hand has none. Said
            # per instance: a process-wide "said once" would be state kept at import.
            log.warning(
                "discord profile %s: no key-value store was given, so messages sent while "
                "the gateway is down are not read back",
                self._profile,
            )
            return None
        positions = Positions(self._kv, profile=self._profile)
        return positions if await positions.load() else None

    async def _connect(self, client: BridgeClient) -> ProviderError:
        """Run the gateway until it ends; the error ``receive`` raises for how it ended."""
        try:
            await client.connect(reconnect=False)
        except discord.ConnectionClosed as exc:
            if exc.code == _GATEWAY_AUTH_FAILED:
                return Unreachable("Discord refused the bot token on the gateway")
            if exc.code in _GATEWAY_BAD_INTENTS:
                return Unreachable(_INTENTS_ADVICE)
            return ConnectionLost(f"Discord gateway closed the connection (close code {exc.code})")
        except discord.PrivilegedIntentsRequired:
            return Unreachable(_INTENTS_ADVICE)
        except discord.LoginFailure:
            return Unreachable("Discord refused the bot token on the gateway")
        except Exception as exc:
            return ConnectionLost(f"Discord gateway connection lost: {type(exc).__name__}")
        return ConnectionLost("Discord gateway closed the connection")

    # ------------------------------------------------------------------ reading back

    async def _history(self, channel_id: int, query: dict[str, int]) -> list[Any]:
        """One page of ``GET /channels/{id}/messages`` (``_read``)."""
        where = f"read of channel {channel_id}'s messages"
        path = f"/channels/{channel_id}/messages?{urlencode(query)}"
        answer = await self._read(path, where=where, bucket=("messages", channel_id))
        if not isinstance(answer, list):
            raise ConnectionLost(f"Discord answered {where} with no list of messages")
        return answer

    async def _last_message_id(self, channel_id: int) -> int | None:
        """The channel's ``last_message_id`` (``GET /channels/{id}``, ``_read``), ``None`` when
        Discord names none (a channel never written in)."""
        where = f"read of channel {channel_id}"
        answer = await self._read(
            f"/channels/{channel_id}", where=where, bucket=("channel", channel_id)
        )
        if not isinstance(answer, dict):
            raise ConnectionLost(f"Discord answered {where} with no channel")
        return snowflake(answer.get("last_message_id"))

    async def _read(self, path: str, *, where: str, bucket: tuple[str, int]) -> Any:
        """One ``GET`` of the read-back. A read that left its bucket (route and channel) empty
        (``X-RateLimit-Remaining: 0``) makes the bucket's next one wait out ``Reset-After``, as
        Discord asks; a 429 waits as Discord says and asks again, and one for the whole bot
        (``is_global_limit``) holds every read-back request of this provider as long; a failure
        the next run may not meet (5xx, network, deadline) is ``ConnectionLost``, and the
        rebuilt provider reads from the same stored position."""

        def note(headers: Mapping[str, str]) -> None:
            if headers.get("x-ratelimit-remaining", "").strip() != "0":
                return
            reset_after = parse_retry_after(headers.get("x-ratelimit-reset-after"))
            if reset_after is not None:
                self._read_refill[bucket] = anyio.current_time() + reset_after

        for _ in range(_READ_RATE_LIMITS):
            until = max(self._read_refill.pop(bucket, 0.0), self._reads_resume_at)
            while until > anyio.current_time():
                await anyio.sleep(until - anyio.current_time())
                # a global 429 met meanwhile moved the hold on: sleep on until it has passed
                until = max(until, self._reads_resume_at)
            try:
                return await self._call(
                    "GET", path, where=where, errors=_read_error, headers_to=note
                )
            except RateLimited as exc:
                wait = _READ_DEFAULT_WAIT if exc.retry_after is None else exc.retry_after
                if isinstance(exc, _GlobalLimit):
                    self._hold_reads(wait)
                else:
                    await anyio.sleep(wait)
            except TransportError as exc:
                raise ConnectionLost(f"Discord {where} failed: {exc}") from None
        raise ConnectionLost(f"Discord rate limited {where} {_READ_RATE_LIMITS} times in a row")

    def _hold_reads(self, seconds: float) -> None:
        """A global 429: no read-back request for ``seconds``. The (up to
        ``BACKFILL_CONCURRENCY``) channels read at once would each go on meeting 429s, and
        Discord bans an IP that makes 10,000 invalid requests in 10 minutes; discord.py holds
        all its requests the same way."""
        until = anyio.current_time() + seconds
        if until > self._reads_resume_at:
            self._reads_resume_at = until
            log.warning(
                "discord profile %s: Discord rate limited the bot globally; reading back "
                "channels waits %g s",
                self._profile,
                seconds,
            )
