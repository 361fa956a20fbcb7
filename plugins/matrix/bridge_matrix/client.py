"""The homeserver's client-server API over httpx: one request per call, nothing hidden.

httpx sends each request once (``retries=0`` on the transport: no connect retries either) and
never sleeps; a 429 comes back to the caller as it came, so the core's sender paces and pauses
(ADR 0080). ``MatrixClient.request`` returns the status, headers and parsed body; reading them as
errors is ``bridge_matrix.errors``' job.

Exception hierarchy: only httpx's own (``httpx.TransportError`` and its subclasses, timeouts
among them), which the provider reads as ``TransportError``.
"""

from __future__ import annotations

import hashlib
import json
import urllib.parse
from dataclasses import dataclass
from typing import Any

import httpx

__all__ = ["MatrixClient", "MatrixResponse", "event_size", "quote", "txn_id"]


def quote(value: str) -> str:
    """A path segment: room ids, event ids and user ids contain ``!$@:#/``."""
    return urllib.parse.quote(value, safe="")


def txn_id(key: str) -> str:
    """A transaction id for the idempotency ``key`` (URL-safe, fixed length): the same key gives
    the same id in every process, so a resend is recognised by the homeserver."""
    return "bridge-" + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:40]


def event_size(content: dict[str, Any]) -> int:
    """Bytes of ``content`` as JSON with UTF-8 text, as the homeserver measures events."""
    return len(json.dumps(content, ensure_ascii=False, separators=(",", ":")).encode())


@dataclass(frozen=True, slots=True)
class MatrixResponse:
    status: int
    headers: httpx.Headers
    body: Any

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


class MatrixClient:
    """An httpx ``AsyncClient`` bound to one homeserver and one access token."""

    def __init__(self, base_url: str, access_token: str, *, timeout: float) -> None:
        self._client = httpx.AsyncClient(
            base_url=base_url,
            headers={"Authorization": f"Bearer {access_token}"},
            timeout=timeout,
            transport=httpx.AsyncHTTPTransport(retries=0),
        )

    def __repr__(self) -> str:
        return f"MatrixClient({str(self._client.base_url)!r})"

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: dict[str, Any] | None = None,
        read_timeout: float | None = None,
    ) -> MatrixResponse:
        extra: dict[str, Any] = {} if read_timeout is None else {"timeout": read_timeout}
        response = await self._client.request(
            method,
            path,
            content=None
            if body is None
            else json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode(),
            headers=None if body is None else {"Content-Type": "application/json"},
            params=params,
            **extra,
        )
        try:
            parsed = response.json() if response.content else None
        except ValueError:
            parsed = None
        return MatrixResponse(response.status_code, response.headers, parsed)

    async def aclose(self) -> None:
        await self._client.aclose()
