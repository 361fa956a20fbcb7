"""Reading Bot Connector failures as the core's error taxonomy.

The connector answers errors with an HTTP status and ``{"error": {"code", "message"}}``; msrest
raises them as ``ErrorResponseException`` (``.response`` is the ``requests.Response``)::

    429 Throttled (Retry-After)                           -> RateLimited(retry_after)
    412 PreconditionFailed, 502, 503, 504, network        -> TransportError (retry with backoff)
    3xx (a redirect, not followed: a POST would repeat)   -> TransportError
    500 ServiceError on a post                            -> MessageRejected (Microsoft: do not
                                                             retry; it may have been posted)
    500 on an edit                                        -> TransportError (a PUT is idempotent)
    403 BotDisabledByAdmin, ConversationBlockedByUser     -> Unreachable
    403 BotNotInConversationRoster, NotEnoughPermissions  -> Forbidden (the bot may be re-added)
    404 ActivityNotFoundInConversation                    -> NotFound
    404 ConversationNotFound                              -> Unreachable
    413 MessageSizeTooBig, 400, 422 (the body)            -> MessageRejected
    401, other 4xx                                        -> Unreachable
    token service refusing the app id and password        -> Unreachable
    token service throttling (429, Retry-After)           -> RateLimited(retry_after)
    token service 408, 5xx, network                       -> TransportError

``MessageRejected`` (ADR 0017) drops that one message and keeps the channel: a refused body, or a
post that must not be sent again, says nothing about the next message. A 500 on a post belongs
there rather than with ``Unreachable`` (which would stop the whole channel for one lost answer)
or ``TransportError`` (whose resend may duplicate a message Teams already shows).

``map_error(status=, body=, headers=, operation=, where=)`` reads an answer and has the shape of
every shipped plugin's mapper and the template's, with ``operation`` as Matrix's has it: a 500 or
a 404 reads one way on a post and another on an edit. msrest raises every refusal as an
exception, so the provider calls ``map_exception(error, operation=, where=)``, which hands the
answer inside an ``ErrorResponseException`` to ``map_error`` and reads the token service's and
the network's failures itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import requests
from msrest.exceptions import ClientRequestError, HttpOperationError

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
from bridge_teams.error_codes import ERROR_CODES
from bridge_teams.transport import CredentialsError

__all__ = ["Operation", "map_error", "map_exception"]

Operation = Literal["post", "edit"]


_TRANSIENT_STATUSES = frozenset({408, 412, 502, 503, 504})
_BODY_STATUSES = frozenset({400, 413, 422})


def _body_of(error: HttpOperationError) -> Any:
    """The connector's error body: msrest's reading of it when it made one, else the response's
    JSON (``None`` when that is not JSON either)."""
    nested: Any = getattr(getattr(error, "error", None), "error", None)
    code = getattr(nested, "code", None)
    if code:
        return {"error": {"code": code}}
    response = getattr(error, "response", None)
    try:
        return response.json() if response is not None else None
    except (ValueError, AttributeError):  # not JSON; a response without a body to read
        return None


def map_error(
    *,
    status: int,
    body: Any,
    headers: Mapping[str, Any] | None,
    operation: Operation,
    where: str,
) -> ProviderError:
    """The core error for the connector's answer ``status``/``body`` to ``where``. Messages carry
    the status and the connector's error code, never headers or tokens."""
    refusal = body.get("error") if isinstance(body, dict) else None
    raw = refusal.get("code") if isinstance(refusal, dict) else None
    code = str(raw) if raw else ""
    detail = f"HTTP {status}" + (f" {code}" if code else "")
    if status == 429:
        return RateLimited(
            f"Teams throttled {where} ({detail})", retry_after=retry_after_header(headers)
        )
    if 300 <= status < 400:
        return TransportError(f"Teams answered {where} with a redirect ({detail}), not followed")
    if code in ERROR_CODES:
        kind, meaning = ERROR_CODES[code]
        return kind(f"Teams refused {where}: {meaning} ({detail})")
    if status in _TRANSIENT_STATUSES:
        return TransportError(f"Teams failed {where} ({detail}); retry with backoff")
    if status == 500:
        if operation == "edit":
            return TransportError(f"Teams failed {where} ({detail})")
        return MessageRejected(
            f"Teams failed {where} ({detail}); not resent, as Microsoft advises for 500 "
            "(the message may have been posted)"
        )
    if status == 403:
        return Forbidden(f"Teams refused {where} ({detail})")
    if status == 404:
        if operation == "edit":
            return NotFound(f"Teams refused {where}: not found ({detail})")
        return Unreachable(f"Teams refused {where}: conversation not found ({detail})")
    if status == 401:
        return Unreachable(f"Teams refused {where}: bad credentials ({detail})")
    if status >= 500:
        return TransportError(f"Teams failed {where} ({detail})")
    if status in _BODY_STATUSES:
        return MessageRejected(f"Teams refused the message in {where} ({detail})")
    return Unreachable(f"Teams refused {where} ({detail}); resending will not help")


def map_exception(error: BaseException, *, operation: Operation, where: str) -> ProviderError:
    """The core error for an exception raised while doing ``where``: the connector's refusal
    (read by ``map_error``), the token service's, or the network's."""
    if isinstance(error, ProviderError):
        return error
    if isinstance(error, CredentialsError):
        if error.status == 429:
            return RateLimited(f"Teams {where}: {error}", retry_after=error.retry_after)
        if error.status is None or error.status >= 500 or error.status == 408:
            return TransportError(f"Teams {where}: {error}")
        return Unreachable(f"Teams {where}: {error}; check app_id and app_password")
    if isinstance(error, HttpOperationError):
        response = error.response
        return map_error(
            status=int(getattr(response, "status_code", 0) or 0),
            body=_body_of(error),
            headers=getattr(response, "headers", None),
            operation=operation,
            where=where,
        )
    if isinstance(error, (ClientRequestError, requests.RequestException, OSError, TimeoutError)):
        return TransportError(f"network failure during Teams {where}: {type(error).__name__}")
    return TransportError(f"unexpected failure during Teams {where}: {type(error).__name__}")
