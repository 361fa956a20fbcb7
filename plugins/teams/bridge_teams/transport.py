"""The seam between the Teams provider and the Bot Framework SDK.

botbuilder-python is archived upstream (ADR 0047), so everything the provider needs from it passes
through ``TeamsTransport``: send an activity to a conversation, replace one. Two implementations:

- ``ConnectorTransport``: botframework-connector's ``ConnectorClient`` (msrest over requests),
  one client per service URL, msrest's resends turned off, every call in a worker thread so the
  blocking ``requests`` I/O never stalls the event loop. Production uses this one.
- ``AdapterTransport``: any botbuilder ``BotAdapter`` through ``continue_conversation`` (the
  SDK's proactive path): botbuilder's ``TestAdapter`` in tests, or an adapter a host already has.

Exception hierarchy: transports raise the SDK's own exceptions (msrest ``ErrorResponseException``,
``ClientRequestError``, ``CredentialsError``); ``bridge_teams.errors`` reads them.
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
    """The token service refused the app id and password (``status`` is its HTTP status)."""

    def __init__(self, message: str, *, status: int | None) -> None:
        super().__init__(message)
        self.status = status


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
                raise CredentialsError(
                    f"token service refused app {self.microsoft_app_id!r} "
                    f"(HTTP {response.status_code}, {reason})",
                    status=response.status_code,
                )
            body = response.json()
            self._token = str(body["access_token"])
            self._expires_at = time.time() + float(body.get("expires_in", 3600)) - 300.0
            return self._token


def _turn_off_resends(client: ConnectorClient) -> None:
    # msrest's default resends 408 and 5xx (POSTs included) behind the ledger's back; here a
    # status is never a reason to resend, and neither is a connection or read error.
    retry_policy = client.config.retry_policy
    retry_policy.retries = 0
    policy: Retry = retry_policy.policy
    policy.status = 0
    policy.redirect = 0
    policy.status_forcelist = frozenset()
    policy.raise_on_status = False


class ConnectorTransport:
    """``ConnectorClient`` per service URL, called from worker threads."""

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
        self._clients_lock = threading.Lock()
        self._limiter = anyio.CapacityLimiter(max_threads)

    def __repr__(self) -> str:
        return f"ConnectorTransport(services={sorted(self._clients)!r})"

    def _client(self, service_url: str) -> ConnectorClient:
        with self._clients_lock:
            client = self._clients.get(service_url)
            if client is None:
                client = ConnectorClient(self._credentials, base_url=service_url)
                _turn_off_resends(client)
                client.config.connection.timeout = self._timeout
                self._clients[service_url] = client
            return client

    async def _run(self, call: Callable[[], Any]) -> Any:
        def once_more_on_401() -> Any:
            try:
                return call()
            except HttpOperationError as exc:
                # The connector refused our cached token, so it did not act on the request:
                # fetching a fresh token and sending again cannot duplicate anything.
                if getattr(exc.response, "status_code", None) != 401:
                    raise
            self._credentials.get_access_token(force_refresh=True)
            return call()

        return await anyio.to_thread.run_sync(once_more_on_401, limiter=self._limiter)

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
        with self._clients_lock:
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
