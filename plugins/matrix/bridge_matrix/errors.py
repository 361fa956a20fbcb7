"""Reading the homeserver's answers as the core's error taxonomy.

The client-server API answers errors with an HTTP status and ``{"errcode", "error"}``; the
errcode is the more precise of the two, so it is read first and the status is the fallback::

    M_LIMIT_EXCEEDED (429; retry_after_ms in the body, or Retry-After)   -> RateLimited
    M_NOT_FOUND on an edit, or a 400 "Can't send relation to unknown event"
    (the edit's target, or a post's thread root), M_NOT_FOUND or a bare
    404 on a room's history (``/messages``)                               -> NotFound
    M_FORBIDDEN (kicked, banned, not joined, no power), M_GUEST_ACCESS_FORBIDDEN,
    M_RESOURCE_LIMIT_EXCEEDED (the server's user limit)                   -> Forbidden
    M_UNKNOWN_TOKEN, M_MISSING_TOKEN, M_USER_DEACTIVATED, M_UNRECOGNIZED,
    M_NOT_FOUND on a post (the room is gone), other 401/404              -> Unreachable
    M_TOO_LARGE, M_BAD_JSON, M_NOT_JSON, M_INVALID_PARAM, other 400/413   -> MessageRejected
    408, 425, 5xx, network errors, timeouts                                -> TransportError

A kick or ban reads as ``Forbidden``, not ``Unreachable``: a room admin can invite the bot back,
and the core re-checks a forbidden channel every 5 minutes. ``M_UNKNOWN_TOKEN`` is permanent for
this profile: the token was revoked or the device logged out.

``map_error(status=, body=, headers=, operation=, where=)`` has the shape of every shipped
plugin's mapper and the template's, with ``operation`` as Teams' has it: a not-found on an edit
is the event (``NotFound``: post anew) but on a post the room (``Unreachable``), and only the
caller knows which it asked. On ``history`` (a room's ``/messages``, read by inbound) it is that
one room's history, which the caller skips: ``Unreachable`` would end inbound for every room. A
relation to an unknown event is never the room: on a post it is the thread's root
(``NotFound``, "the message (or thread) is gone"). There is no ``map_exception``: httpx's
failures are read at the call, which knows its deadline.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from bridge_core import (
    Forbidden,
    MessageRejected,
    NotFound,
    ProviderError,
    RateLimited,
    TransportError,
    Unreachable,
    parse_retry_after,
    retry_after_header,
)
from bridge_matrix.error_codes import ERROR_CODES

__all__ = ["Operation", "map_error", "retry_after_of"]

Operation = Literal["post", "edit", "probe", "sync", "history"]


_BODY_STATUSES = frozenset({400, 413, 422})

# A proxy in front of the homeserver answers 408 when it closed a slow request and 425 when it
# will not replay early data; both say "try again" (RFC 9110, RFC 8470), not "the room is gone".
_TRANSIENT_STATUSES = frozenset({408, 425})


def retry_after_of(status: int, headers: Any, body: Any) -> float | None:
    """Seconds to wait from a 429: the body's ``retry_after_ms`` (the spec's, precise to the
    millisecond), else the ``Retry-After`` header (seconds, MSC4041), else ``None``."""
    # The core's one parser (ADR 0064): garbage, negative and non-finite values give None.
    if isinstance(body, dict):
        seconds = parse_retry_after(body.get("retry_after_ms"), scale=0.001)
        if seconds is not None:
            return seconds
    return retry_after_header(headers)


_TOKEN_ERRCODES = frozenset({"M_UNKNOWN_TOKEN", "M_MISSING_TOKEN", "M_USER_DEACTIVATED"})


def map_error(
    *,
    status: int,
    body: Any,
    headers: Mapping[str, Any] | None,
    operation: Operation,
    where: str,
) -> ProviderError:
    """The core error for the homeserver's answer ``status``/``body`` to ``where``.

    Messages carry the status, the errcode and the server's own words, never the access token.
    """
    error = _mapped(status=status, body=body, headers=headers, operation=operation, where=where)
    if operation == "history" and isinstance(error, Unreachable):
        errcode = body.get("errcode") if isinstance(body, dict) else None
        # Only the token is every room's: any other refusal of one room's history (an
        # M_UNRECOGNIZED, a 405 or 410 from a proxy) skips that room's gap, and live
        # messages go on; Unreachable would end inbound for every room.
        if status != 401 and errcode not in _TOKEN_ERRCODES:
            return NotFound(f"{error} (that room's gap is skipped)")
    return error


def _mapped(
    *,
    status: int,
    body: Any,
    headers: Mapping[str, Any] | None,
    operation: Operation,
    where: str,
) -> ProviderError:
    errcode = str(body.get("errcode", "")) if isinstance(body, dict) else ""
    said = str(body.get("error", ""))[:200] if isinstance(body, dict) else ""
    detail = f"HTTP {status}" + (f" {errcode}" if errcode else "") + (f": {said}" if said else "")
    if status == 429 or errcode == "M_LIMIT_EXCEEDED":
        return RateLimited(
            f"the homeserver rate limited {where} ({detail})",
            retry_after=retry_after_of(status, headers, body),
        )
    # Synapse refuses a relation to an event it does not have with a bare 400 (M_UNKNOWN). On a
    # post that relation is the thread, so the root is what is missing, not the room: Unreachable
    # would give up a room that takes every other post.
    if status == 400 and "unknown event" in said.lower():
        if operation == "edit":
            return NotFound(f"the homeserver has no event to edit in {where} ({detail})")
        return NotFound(f"the homeserver has no thread root for {where} ({detail})")
    if errcode == "M_NOT_FOUND" or (status == 404 and not errcode):
        if operation == "edit":
            return NotFound(f"the homeserver has no event to edit in {where} ({detail})")
        if operation == "history":
            return NotFound(f"the homeserver has no such room or history for {where} ({detail})")
        return Unreachable(f"the homeserver refused {where}: not found ({detail})")
    if errcode in ERROR_CODES:
        kind, meaning = ERROR_CODES[errcode]
        return kind(f"the homeserver refused {where}: {meaning} ({detail})")
    if status >= 500:
        return TransportError(f"the homeserver failed {where} with a server error ({detail})")
    if status in _TRANSIENT_STATUSES:
        return TransportError(f"the homeserver asked to repeat {where} later ({detail})")
    if status == 403:
        return Forbidden(f"the homeserver refused {where}: forbidden ({detail})")
    if status == 401:
        return Unreachable(f"the homeserver refused {where}: check access_token ({detail})")
    if status in _BODY_STATUSES:
        return MessageRejected(f"the homeserver refused the event in {where} ({detail})")
    return Unreachable(f"the homeserver refused {where} ({detail}); resending will not help")
