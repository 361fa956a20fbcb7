"""An httpx client for {{ cookiecutter.provider_name }}'s REST API.

FILL IN: the paths, payloads and response fields below describe a typical REST chat API; change
them to your platform's. Keep the shape: one method per call bridge-core needs, every failure
turned into a bridge-core error by ``errors``, no retries and no sleeping (the core's sender and
ledger decide when to try again, and a resend they cannot see is an unlabelled duplicate).

The API this template assumes::

    POST  {base}/channels/{channel}/messages            {"text", "thread_id"?}  -> {"id", ...}
    PATCH {base}/channels/{channel}/messages/{message}  {"text"}                -> {"id", ...}
    GET   {base}/channels/{channel}                                         -> {"id", "can_post"}

    Authorization: Bearer <token>;  errors: {"error": {"code", "message"}};  429 + Retry-After
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx
from bridge_core import ProviderError, TransportError, mapped_call
from pydantic import SecretStr

from {{ cookiecutter.__package }}.errors import (
    map_error,
    map_exception,
)

__all__ = ["ApiClient"]


def _segment(value: str) -> str:
    """A path segment with everything but unreserved characters escaped."""
    return quote(value, safe="")


class ApiClient:
    """One authenticated connection pool to the API. Safe to share within one event loop."""

    def __init__(
        self,
        *,
        base_url: str,
        token: SecretStr,
        timeout: float,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._base_url = base_url.rstrip("/")
        self._http = httpx.AsyncClient(
            base_url=self._base_url + "/",
            headers={
                "Authorization": f"Bearer {token.get_secret_value()}",
                "User-Agent": "{{ cookiecutter.__distribution }} (bridge-core provider)",
            },
            timeout=timeout,
            transport=transport,
        )

    def __repr__(self) -> str:
        # Never the headers: they hold the token.
        return f"ApiClient(base_url={self._base_url!r})"

    async def _call(self, method: str, path: str, *, where: str, json: Any = None) -> Any:
        async def send() -> httpx.Response:
            return await self._http.request(method, path, json=json)

        def read(exc: Exception) -> ProviderError | None:
            if isinstance(exc, httpx.HTTPError):
                return map_exception(exc, where=where)
            return None  # not the platform's failure: a bug, raised as it is

        # mapped_call raises the core error outside the except block: httpx's exception holds
        # the request, with the token in its headers, and must not ride along as __context__.
        response = await mapped_call(send, read)
        if not response.is_success:
            try:
                body = response.json()
            except ValueError:
                body = None  # an error page that is not JSON: read by its status alone
            raise map_error(
                status=response.status_code, body=body, headers=response.headers, where=where
            )
        try:
            return response.json()
        except ValueError:
            raise TransportError(
                f"{{ cookiecutter.provider_name }} answered {where} with a body that is not JSON",
            ) from None

    async def post_message(self, channel: str, text: str, *, thread: str | None) -> str:
        """Post ``text``; returns the new message's id."""
        payload: dict[str, Any] = {"text": text}
        if thread is not None:
            payload["thread_id"] = thread
        where = f"post to channel {channel}" + (f" thread {thread}" if thread else "")
        body = await self._call(
            "POST", f"channels/{_segment(channel)}/messages", where=where, json=payload
        )
        return self._message_id(body, where)

    async def edit_message(self, channel: str, message_id: str, text: str) -> str:
        """Replace the text of a message the bot posted; returns its id."""
        where = f"edit of message {message_id} in channel {channel}"
        body = await self._call(
            "PATCH",
            f"channels/{_segment(channel)}/messages/{_segment(message_id)}",
            where=where,
            json={"text": text},
        )
        return self._message_id(body, where)

    async def can_post(self, channel: str) -> bool:
        """Whether the bot may post to ``channel`` (raises on any refusal)."""
        body = await self._call(
            "GET", f"channels/{_segment(channel)}", where=f"look-up of channel {channel}"
        )
        return bool(isinstance(body, dict) and body.get("can_post", True))

    @staticmethod
    def _message_id(body: Any, where: str) -> str:
        if isinstance(body, dict) and body.get("id") not in (None, ""):
            return str(body["id"])
        raise TransportError(
            f"{{ cookiecutter.provider_name }} answered {where} without a message id",
        )

    async def aclose(self) -> None:
        await self._http.aclose()
