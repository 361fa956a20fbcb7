"""discord.py's client, pointed at a configurable API base and watched per call.

discord.py builds every request URL from the class attribute ``discord.http.Route.BASE``; changing
that attribute would move every client in the process. ``RebasedHTTPClient`` instead rewrites the
URL of each request it sends, so two providers (or two tests) can talk to two different bases.

``CallTrace`` records, for the call running in the current task, the responses discord.py saw on
the way (it absorbs 429s and 5xx resends internally), so a call cut off by our own deadline can
still say "rate limited, retry after N s" instead of a bare timeout.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import aiohttp
import discord
import yarl
from discord.http import HTTPClient, Route

from bridge_core import retry_after_header
from bridge_discord.settings import DEFAULT_API_BASE

__all__ = [
    "DEFAULT_API_BASE",
    "BridgeClient",
    "CallTrace",
    "RebasedHTTPClient",
    "current_call",
    "make_trace_config",
]


@dataclass(slots=True)
class CallTrace:
    """What discord.py saw while performing one of our calls."""

    statuses: list[int] = field(default_factory=list)
    retry_after: float | None = None


current_call: ContextVar[CallTrace | None] = ContextVar("bridge_discord_call", default=None)


async def _on_request_end(
    session: aiohttp.ClientSession,
    context: SimpleNamespace,
    params: aiohttp.TraceRequestEndParams,
) -> None:
    # aiohttp runs trace callbacks inside the request coroutine, i.e. in the calling task, so the
    # context variable is the one our call set.
    call = current_call.get()
    if call is None:
        return
    status = params.response.status
    call.statuses.append(status)
    if status == 429:
        seen = retry_after_header(params.response.headers)
        call.retry_after = seen if seen is not None else call.retry_after


def make_trace_config() -> aiohttp.TraceConfig:
    trace = aiohttp.TraceConfig()
    trace.on_request_end.append(_on_request_end)
    return trace


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
    ``gateway_url`` (discord.py's default when ``None``), and whose messages go to a handler."""

    def __init__(
        self,
        *,
        base_url: str,
        gateway_url: str | None,
        intents: discord.Intents,
        max_ratelimit_timeout: float,
    ) -> None:
        trace = make_trace_config()
        super().__init__(
            intents=intents,
            allowed_mentions=discord.AllowedMentions.none(),
            max_ratelimit_timeout=max_ratelimit_timeout,
            http_trace=trace,
        )
        http = RebasedHTTPClient(
            base_url,
            self.loop,
            gateway_url=gateway_url,
            max_ratelimit_timeout=max_ratelimit_timeout,
            http_trace=trace,
        )
        # discord.Client offers no way to pass an HTTP client in; the state shares the same one.
        self.http = http
        self._connection.http = http
        self.message_handler: MessageHandler | None = None

    async def on_message(self, message: discord.Message) -> None:
        if self.message_handler is not None:
            await self.message_handler(message)
