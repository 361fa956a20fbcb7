"""Discord's REST API for the provider's sends: one HTTP request per call, and nothing else.

discord.py's HTTP client is made for a bot that wants every call to succeed eventually: it keeps
a bucket per route, sleeps through a 429 shorter than its 30 s floor and through a 500, 502, 504
or 524 (up to five tries), and resends after a reset connection. That hides waits and resends
from the core's sender, which owns the channel's budget, and a call cut off by our deadline while
discord.py sleeps skips the bucket's reset: the bucket stays at ``remaining=0`` and every later
call waits inside discord.py, sending nothing (ADR 0066). So the provider's posts, edits and
probes go through ``DiscordRest``: one aiohttp request, its answer read as a core error
(``bridge_discord.errors.map_error``), no state shared between calls but the pooled
connections. discord.py stays for the gateway (``bridge_discord.client``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import aiohttp

from bridge_core import ProviderError, TransportError, mapped_call
from bridge_discord.errors import map_error

__all__ = ["DiscordRest"]


def _user_agent() -> str:
    # Discord asks bots for "DiscordBot ($url, $versionNumber)".
    try:
        number = version("bridge-discord")
    except PackageNotFoundError:
        number = "0"
    return f"DiscordBot (https://github.com/bridge-core/bridge-core, {number}) bridge-discord"


class DiscordRest:
    """Discord's REST API at ``base_url`` (with its version, ``…/api/v10``) with a bot token.

    Every method sends exactly one request and returns the decoded JSON answer, or raises a core
    ``ProviderError``: a 429 as ``RateLimited`` with Discord's ``retry_after``, at once. The
    session is made on first use, in the running event loop; ``aclose`` releases it.
    """

    def __init__(self, *, base_url: str, token: str, timeout: float) -> None:
        self._base_url = base_url.rstrip("/")
        self._token = token
        self._timeout = timeout
        self._session: aiohttp.ClientSession | None = None

    def __repr__(self) -> str:
        return f"DiscordRest(base_url={self._base_url!r})"

    def _ready_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self._timeout),
                headers={"User-Agent": _user_agent()},
            )
            # aiohttp sends a GET or PUT again by itself when a kept-alive connection drops;
            # one request per call (its own test_utils turns this off too)
            self._session._retry_connection = False
        return self._session

    async def request(
        self,
        method: str,
        path: str,
        *,
        where: str,
        body: dict[str, Any] | None = None,
        errors: Callable[..., ProviderError] = map_error,
        headers_to: Callable[[Mapping[str, str]], None] | None = None,
    ) -> Any:
        """Send ``method path`` (``path`` below the base, ``/channels/1/messages``) once.
        ``errors`` reads a refusal (``map_error``'s keywords); the backfill reads a 404 its own
        way, and has the answer's headers (``headers_to``, names in lower case) for its rate
        limit."""
        headers = {"Authorization": f"Bot {self._token}"}
        data: bytes | None = None
        if body is not None:
            headers["Content-Type"] = "application/json"
            data = json.dumps(body, ensure_ascii=False).encode("utf-8")

        async def call() -> Any:
            async with self._ready_session().request(
                method, self._base_url + path, data=data, headers=headers, allow_redirects=False
            ) as response:
                raw = await response.read()
                if headers_to is not None:
                    headers_to({k.lower(): v for k, v in response.headers.items()})
                answer = _decode(raw)
                if 200 <= response.status < 300:
                    if response.status == 204:
                        return None
                    if answer is _NOT_JSON:
                        raise TransportError(f"Discord answered {where} with a body not JSON")
                    return answer
                raise errors(
                    status=response.status,
                    body=answer if answer is not _NOT_JSON else None,
                    headers=response.headers,
                    where=where,
                )

        def read(exc: Exception) -> ProviderError | None:
            if isinstance(exc, TimeoutError):
                return TransportError(
                    f"Discord did not answer {where} within the {self._timeout:g} s deadline"
                )
            if isinstance(exc, (aiohttp.ClientError, OSError)):
                return TransportError(f"network failure during {where}: {type(exc).__name__}")
            return None

        # mapped_call raises outside the except block: aiohttp's exceptions carry the request,
        # whose headers hold the bot token, and must not ride along as __context__.
        return await mapped_call(call, read)

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None and not session.closed:
            await session.close()


_NOT_JSON = object()


def _decode(raw: bytes) -> Any:
    if not raw:
        return _NOT_JSON
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return _NOT_JSON
