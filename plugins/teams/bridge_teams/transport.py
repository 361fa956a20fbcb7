"""The seam between the Teams provider and the Bot Framework SDK.

botbuilder-python is archived upstream (ADR 0047), so everything the provider needs from it passes
through ``TeamsTransport``: send an activity to a conversation, replace one. Two implementations:

- ``ConnectorTransport``: botframework-connector's ``ConnectorClient`` (msrest over requests),
  one client per service URL, msrest's resends turned off, every call in a worker thread so the
  blocking ``requests`` I/O never stalls the event loop. A caller may stop waiting (the
  provider's ``call_deadline``); the thread then runs on to the end of its current request, bounded
  by requests' own timeouts, and never starts another. Production uses this one.
- ``AdapterTransport``: any botbuilder ``BotAdapter`` through ``continue_conversation`` (the
  SDK's proactive path): botbuilder's ``TestAdapter`` in tests, or an adapter a host already has.

Exception hierarchy: transports raise the SDK's own exceptions (msrest ``ErrorResponseException``,
``ClientRequestError``, ``CredentialsError``); ``bridge_teams.errors`` reads them. One core error
comes straight from here: ``TransportError`` when too many calls given up on still hold threads.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
import anyio.to_thread
import requests
from botbuilder.core import BotAdapter, TurnContext
from botbuilder.schema import (
    Activity,
    ActivityTypes,
    ChannelAccount,
    ConversationAccount,
    ConversationReference,
    ResourceResponse,
)
from botframework.connector import ConnectorClient  # type: ignore[import-untyped]
from botframework.connector.auth import AppCredentials  # type: ignore[import-untyped]
from msrest.exceptions import HttpOperationError
from urllib3.util.retry import Retry

from bridge_core import TransportError, retry_after_header
from bridge_teams.settings import DEFAULT_SCOPE

__all__ = [
    "AdapterTransport",
    "ClientCredentials",
    "ConnectorTransport",
    "CredentialsError",
    "TeamsTransport",
    "message_activity",
]


class CredentialsError(Exception):
    """The token service gave no token: ``status`` is its HTTP status (``None`` when it was not
    reached), ``retry_after`` the seconds its ``Retry-After`` asked for, if any."""

    def __init__(
        self, message: str, *, status: int | None, retry_after: float | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


def message_activity(text: str, *, activity_id: str | None = None) -> Activity:
    """A plain message activity: markdown as Teams renders it, and no mention entities, so no
    ``<at>`` in the text can ever notify anyone."""
    return Activity(type=ActivityTypes.message, id=activity_id, text=text, text_format="markdown")


class TeamsTransport(Protocol):
    """What the provider needs from the Bot Framework: two calls and a close."""

    async def send(self, reference: ConversationReference, activity: Activity) -> str:
        """Post ``activity`` to the reference's conversation; the new activity's id."""
        ...

    async def update(self, reference: ConversationReference, activity: Activity) -> None:
        """Replace the activity whose id ``activity.id`` carries."""
        ...

    async def aclose(self) -> None: ...


class ClientCredentials(AppCredentials):  # type: ignore[misc]
    """Bot Framework app credentials: an OAuth2 client-credentials token from ``token_url``.

    botbuilder's ``MicrosoftAppCredentials`` goes through MSAL, which insists on discovering a
    Microsoft authority; this does the same token request against a configurable URL (sovereign
    clouds, proxies, a local fake), caches the token until five minutes before it expires, and
    runs in the transport's worker thread. The password never appears in its repr.
    """

    def __init__(
        self,
        *,
        app_id: str,
        password: str,
        token_url: str,
        scope: str = DEFAULT_SCOPE,
        timeout: float = 10.0,
    ) -> None:
        super().__init__(app_id=app_id, oauth_scope=scope)
        self._password = password
        self._token_url = token_url
        self._scope = scope
        self._timeout = timeout
        self._lock = threading.Lock()
        self._token: str | None = None
        self._expires_at = 0.0

    def __repr__(self) -> str:
        return f"ClientCredentials(app_id={self.microsoft_app_id!r}, token_url={self._token_url!r})"

    def get_access_token(self, force_refresh: bool = False) -> str:
        with self._lock:
            if not force_refresh and self._token and time.time() < self._expires_at:
                return self._token
            try:
                response = requests.post(
                    self._token_url,
                    data={
                        "grant_type": "client_credentials",
                        "client_id": self.microsoft_app_id,
                        "client_secret": self._password,
                        "scope": self._scope,
                    },
                    timeout=self._timeout,
                )
            except requests.RequestException as exc:
                raise CredentialsError(
                    f"token request to {self._token_url} failed: {type(exc).__name__}",
                    status=None,
                ) from None
            if response.status_code != 200:
                try:
                    reason = str(response.json().get("error", "unknown"))
                except ValueError:
                    reason = "unreadable answer"
                # Entra ID throttles with 429 and Retry-After: a wait, not a refusal of the app
                verb = "throttled" if response.status_code == 429 else "refused"
                raise CredentialsError(
                    f"token service {verb} app {self.microsoft_app_id!r} "
                    f"(HTTP {response.status_code}, {reason})",
                    status=response.status_code,
                    retry_after=retry_after_header(response.headers),
                )
            body = response.json()
            self._token = str(body["access_token"])
            self._expires_at = time.time() + float(body.get("expires_in", 3600)) - 300.0
            return self._token


def _turn_off_resends(client: ConnectorClient) -> None:
    # msrest's default resends 408 and 5xx (POSTs included) behind the ledger's back, and
    # follows redirects; here a status is never a reason to resend, nor is a connection or read
    # error.
    retry_policy = client.config.retry_policy
    retry_policy.retries = 0
    policy: Retry = retry_policy.policy
    policy.status = 0
    policy.redirect = 0
    policy.status_forcelist = frozenset()
    policy.raise_on_status = False
    # requests follows redirects itself (urllib3's redirect count above is never consulted),
    # and a 307 or 308 repeats the POST: a redirect comes back to the provider as an answer
    client.config.redirect_policy.allow = False


class _Attempt:
    """One call's worker thread as both sides see it (under the transport's lock)."""

    __slots__ = ("abandoned", "running")

    def __init__(self) -> None:
        self.abandoned = False  # the caller stopped waiting (its deadline, or its task cancelled)
        self.running = False  # the thread is inside the call


class ConnectorTransport:
    """``ConnectorClient`` per service URL, called from worker threads.

    At most ``max_threads`` calls run at once. A call whose caller stops waiting leaves its thread
    behind (requests' blocking I/O cannot be interrupted from outside): the thread finishes the
    request it is in, bounded by ``timeout`` per connection attempt and per wait on the answer, its
    result is dropped, and it starts no further request. While ``max_threads`` such threads are
    still running, new calls fail at once instead of adding more.
    """

    def __init__(
        self,
        credentials: AppCredentials,
        *,
        timeout: float,
        max_threads: int = 8,
    ) -> None:
        self._credentials = credentials
        self._timeout = timeout
        self._clients: dict[str, ConnectorClient] = {}
        self._lock = threading.Lock()
        self._limiter = anyio.CapacityLimiter(max_threads)
        self._max_abandoned = max_threads
        self._abandoned_running = 0
        self._abandoned_ended = threading.Condition(self._lock)

    def __repr__(self) -> str:
        return f"ConnectorTransport(services={sorted(self._clients)!r})"

    @property
    def abandoned_threads(self) -> int:
        """Threads still in a call whose caller stopped waiting."""
        with self._lock:
            return self._abandoned_running

    def join_abandoned(self, timeout: float) -> bool:
        """Block (in a thread, not on the event loop) until no thread given up on is running;
        False if some still are after ``timeout`` seconds."""
        with self._abandoned_ended:
            return self._abandoned_ended.wait_for(lambda: not self._abandoned_running, timeout)

    def _thread_done(self, attempt: _Attempt) -> None:
        with self._abandoned_ended:
            attempt.running = False
            if attempt.abandoned:
                self._abandoned_running -= 1
                self._abandoned_ended.notify_all()

    def _client(self, service_url: str) -> ConnectorClient:
        with self._lock:
            client = self._clients.get(service_url)
            if client is None:
                client = ConnectorClient(self._credentials, base_url=service_url)
                _turn_off_resends(client)
                client.config.connection.timeout = self._timeout
                self._clients[service_url] = client
            return client

    async def _run(self, call: Callable[[], Any]) -> Any:
        attempt = _Attempt()

        def still_wanted() -> bool:
            with self._lock:
                return not attempt.abandoned

        def in_thread() -> Any:
            with self._lock:
                if attempt.abandoned:  # given up on before a thread took it: send nothing
                    return None
                attempt.running = True
            try:
                # The token first (cached, or fetched now; msrest then reads the cached one): a
                # slow token service uses up the caller's deadline before the request goes out,
                # and a caller gone by then sends nothing. Without an app id nothing is signed.
                if self._credentials.microsoft_app_id:
                    self._credentials.get_access_token()
                if not still_wanted():
                    return None
                try:
                    return call()
                except HttpOperationError as exc:
                    # The connector refused our cached token, so it did not act on the request:
                    # fetching a fresh token and sending again cannot duplicate anything.
                    if getattr(exc.response, "status_code", None) != 401:
                        raise
                self._credentials.get_access_token(force_refresh=True)
                if not still_wanted():
                    return None
                return call()
            finally:
                self._thread_done(attempt)

        with self._lock:
            if self._abandoned_running >= self._max_abandoned:
                raise TransportError(
                    f"{self._abandoned_running} Bot Connector calls given up on are still "
                    "waiting for an answer; no new call starts until they end"
                )
        try:
            return await anyio.to_thread.run_sync(
                in_thread, limiter=self._limiter, abandon_on_cancel=True
            )
        except anyio.get_cancelled_exc_class():
            # The caller's deadline (or its task's cancellation) cut the wait short. The thread
            # cannot be stopped: it runs until the answer or requests' per-operation timeout ends
            # its current request, its outcome is dropped, and it sends nothing more. anyio has
            # already freed its limiter slot, so it is counted here until it ends: a connector
            # that stalls every call cannot pile up threads without bound.
            with self._lock:
                attempt.abandoned = True
                if attempt.running:
                    self._abandoned_running += 1
            raise

    async def send(self, reference: ConversationReference, activity: Activity) -> str:
        client = self._client(reference.service_url)
        conversation_id = reference.conversation.id
        TurnContext.apply_conversation_reference(activity, reference)

        def call() -> str:
            result: ResourceResponse | None = client.conversations.send_to_conversation(
                conversation_id, activity
            )
            return str(result.id) if result is not None and result.id else ""

        return str(await self._run(call))

    async def update(self, reference: ConversationReference, activity: Activity) -> None:
        client = self._client(reference.service_url)
        conversation_id = reference.conversation.id
        TurnContext.apply_conversation_reference(activity, reference)

        def call() -> None:
            client.conversations.update_activity(conversation_id, activity.id, activity)

        await self._run(call)

    async def aclose(self) -> None:
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            client.close()


class AdapterTransport:
    """Sends through a botbuilder ``BotAdapter``'s proactive path (``continue_conversation``)."""

    def __init__(self, adapter: BotAdapter, *, bot_app_id: str) -> None:
        self._adapter = adapter
        self._bot_app_id = bot_app_id

    def __repr__(self) -> str:
        return f"AdapterTransport(adapter={type(self._adapter).__name__})"

    async def send(self, reference: ConversationReference, activity: Activity) -> str:
        sent: list[str] = []

        async def callback(turn: TurnContext) -> None:
            response = await turn.send_activity(activity)
            sent.append(str(response.id) if response is not None and response.id else "")

        await self._adapter.continue_conversation(reference, callback, self._bot_app_id)
        return sent[0] if sent else ""

    async def update(self, reference: ConversationReference, activity: Activity) -> None:
        async def callback(turn: TurnContext) -> None:
            await turn.update_activity(activity)

        await self._adapter.continue_conversation(reference, callback, self._bot_app_id)

    async def aclose(self) -> None:
        return None


@dataclass(frozen=True, slots=True)
class ReferenceDefaults:
    """What a conversation reference is built from when none was stored for a channel."""

    service_url: str
    bot_id: str
    tenant_id: str | None = None

    def reference_for(self, conversation_id: str) -> ConversationReference:
        return ConversationReference(
            channel_id="msteams",
            service_url=self.service_url,
            bot=ChannelAccount(id=self.bot_id),
            conversation=ConversationAccount(
                id=conversation_id,
                tenant_id=self.tenant_id,
                conversation_type="channel" if conversation_id.startswith("19:") else None,
            ),
        )
