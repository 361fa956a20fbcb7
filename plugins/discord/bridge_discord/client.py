"""discord.py's client for the gateway connection, pointed at a configurable API base.

Only the gateway uses discord.py (its login, ``GET /users/@me``, and the websocket); the
provider's sends go through ``bridge_discord.rest``, one request per call (ADR 0066).

discord.py builds every request URL from the class attribute ``discord.http.Route.BASE``; changing
that attribute would move every client in the process. ``RebasedHTTPClient`` instead rewrites the
URL of each request it sends, so two providers (or two tests) can talk to two different bases.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import discord
import yarl
from discord.http import HTTPClient, Route

from bridge_discord.settings import DEFAULT_API_BASE

__all__ = ["DEFAULT_API_BASE", "BridgeClient", "RebasedHTTPClient"]


class RebasedHTTPClient(HTTPClient):
    """discord.py's HTTP client sending to ``base_url`` instead of ``Route.BASE``."""

    def __init__(
        self,
        base_url: str,
        loop: asyncio.AbstractEventLoop,
        *,
        gateway_url: str | None = None,
        **options: Any,
    ) -> None:
        super().__init__(loop, **options)
        self.base_url = base_url.rstrip("/")
        self.gateway_url = gateway_url

    async def ws_connect(self, url: str, *, compress: int = 0) -> aiohttp.ClientWebSocketResponse:
        # discord.py connects to DiscordWebSocket.DEFAULT_GATEWAY (a class attribute); keep the
        # query it built (version, encoding, compression) and swap only the place.
        if self.gateway_url is not None:
            query = yarl.URL(url).query
            url = str(yarl.URL(self.gateway_url).with_query(query))
        return await super().ws_connect(url, compress=compress)

    async def request(self, route: Route, **kwargs: Any) -> Any:
        default = Route.BASE
        if self.base_url != default and route.url.startswith(default):
            route.url = self.base_url + route.url[len(default) :]
        return await super().request(route, **kwargs)


MessageHandler = Callable[[discord.Message], Awaitable[None]]


class BridgeClient(discord.Client):
    """A ``discord.Client`` whose REST calls go to ``base_url``, whose gateway connection goes to
    ``gateway_url`` (discord.py's default when ``None``), whose messages go to a handler, and
    whose new sessions (READY) call ``session_handler`` synchronously."""

    def __init__(
        self,
        *,
        base_url: str,
        gateway_url: str | None,
        intents: discord.Intents,
        max_ratelimit_timeout: float,
    ) -> None:
        super().__init__(
            intents=intents,
            allowed_mentions=discord.AllowedMentions.none(),
            max_ratelimit_timeout=max_ratelimit_timeout,
        )
        http = RebasedHTTPClient(
            base_url,
            self.loop,
            gateway_url=gateway_url,
            max_ratelimit_timeout=max_ratelimit_timeout,
        )
        # discord.Client offers no way to pass an HTTP client in; the state shares the same one.
        self.http = http
        self._connection.http = http
        self.message_handler: MessageHandler | None = None
        self.session_handler: Callable[[], None] | None = None

    def dispatch(self, event: str, /, *args: Any, **kwargs: Any) -> None:
        # discord.py dispatches "connect" from READY, the start of a new session (a RESUME
        # dispatches "resumed"), and runs handlers as tasks; this hook runs in place, before
        # any later frame is read, so the session's messages find their channels held back.
        if event == "connect" and self.session_handler is not None:
            self.session_handler()
        super().dispatch(event, *args, **kwargs)

    async def on_message(self, message: discord.Message) -> None:
        if self.message_handler is not None:
            await self.message_handler(message)
