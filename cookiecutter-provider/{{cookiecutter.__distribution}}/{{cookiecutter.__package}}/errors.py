"""{{ cookiecutter.provider_name }}'s answers, mapped onto bridge-core's error taxonomy.

bridge-core decides what to do next from the class of the error alone (the notifier pauses,
drops a message ref or marks a channel unhealthy; the ledger waits, resends or abandons a reply),
so this module's one job is to classify every answer correctly. The core's hierarchy::

    ProviderError
    ├── RateLimited       429 (retry_after from Retry-After), code "rate_limited"
    ├── NotFound          the message is gone (an edit target)
    ├── Forbidden         the bot lost access to the channel (re-checked every 5 minutes)
    ├── Unreachable       permanent: channel gone, token refused (the core stops the channel)
    ├── MessageRejected   this message was refused (400, 413, 422: too long, malformed); the
    │                     channel is fine, so only this message is dropped
    └── TransportError    transient: network failure, timeout, 5xx, anything unrecognised

Ask of every refusal whether the next message would meet it too: if so it is ``Unreachable``,
if it is about this message only it is ``MessageRejected``.

FILL IN: ``ERROR_CODES`` (in ``error_codes``) with your platform's documented error codes, and
``_code_of`` with where your platform puts the code in an error body.

``map_error(status=, body=, headers=, where=)`` reads an answer and ``map_exception(error,
where=)`` a request that got none: the shapes the shipped plugins' mappers have (Matrix and
Teams add ``operation=`` where a post and an edit read one answer differently). Keep them, so a
reader who knows one plugin knows yours.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx
from bridge_core import (
    Forbidden,
    MessageRejected,
    NotFound,
    ProviderError,
    RateLimited,
    TransportError,
    Unreachable,
    retry_after_header,
)

from {{ cookiecutter.__package }}.error_codes import ERROR_CODES

__all__ = [
    "map_error",
    "map_exception",
]


def _code_of(body: Any) -> str | None:
    """The error code in a body such as ``{"error": {"code": "not_in_channel", ...}}``."""
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and isinstance(error.get("code"), str):
            return str(error["code"])
        if isinstance(error, str):
            return error
    return None


def map_error(
    *, status: int, body: Any, headers: Mapping[str, Any] | None, where: str
) -> ProviderError:
    """The core error for an answer that was not a success: its HTTP ``status``, its JSON
    ``body`` (``None`` when it was not JSON) and its ``headers``.

    ``where`` says what was attempted (``"post to channel C1"``); it goes into the message,
    which must never contain the token.
    """
    code = _code_of(body)
    detail = f"HTTP {status}" + (f" {code}" if code else "")
    message = f"{{ cookiecutter.provider_name }} refused {where}: {detail}"
    if status == 429 or code == "rate_limited":
        # The core's one Retry-After parser: seconds or an HTTP date; garbage, negative and
        # non-finite values give None (the core backs off on its own), huge ones are capped.
        return RateLimited(message, retry_after=retry_after_header(headers))
    if code is not None and code in ERROR_CODES:
        error, meaning = ERROR_CODES[code]
        return error(f"{message}: {meaning}")
    if status == 401:
        return Unreachable(f"{message}; check the profile's token")
    if status == 403:
        return Forbidden(message)
    if status == 404:
        return NotFound(message)
    if status in (400, 413, 422):
        return MessageRejected(f"{message}; the message was refused, resending it will not help")
    if status == 410:
        return Unreachable(f"{message}; the channel is gone")
    # 408, 5xx and anything unrecognised: transient, retried a bounded number of times.
    return TransportError(message)


def map_exception(error: httpx.HTTPError, *, where: str) -> ProviderError:
    """The core error for a request that got no usable response (network, timeout)."""
    if isinstance(error, httpx.TimeoutException):
        return TransportError(
            f"{{ cookiecutter.provider_name }} did not answer {where} in time",
        )
    kind = type(error).__name__
    return TransportError(
        f"{{ cookiecutter.provider_name }} could not be reached for {where}: {kind}",
    )
