"""Slack's answers read as the core's error taxonomy.

Slack refuses with HTTP 200 and ``{"ok": false, "error": "<code>"}``, rate-limits with HTTP 429,
``Retry-After`` and ``error: "ratelimited"``, and fails at its edge with 5xx pages that are not
JSON. ``ERROR_CODES`` reads each documented code (PLATFORMS.md; ADR 0042 has the reasoning):

========================  ================  ===============================================
code                      core error        why
========================  ================  ===============================================
ratelimited, rate_limited RateLimited       with ``Retry-After`` when Slack sent one
message_not_found,        NotFound          the edit target is gone or no longer editable:
cant_update_message,                        the core posts a new message instead
edit_window_closed,
thread_not_found,
message_not_in_streaming_state
not_in_channel,           Forbidden         the bot lost access; a person can restore it
channel_not_found,                          (invite, unarchive, grant the scope), so the
is_archived, is_inactive,                   core re-checks instead of giving up; Slack
no_permission,                              says channel_not_found for a private channel
missing_scope,                              the bot was removed from too (ADR 0068)
restricted_action,
ekm_access_denied
not_authed, invalid_auth, Unreachable       permanent: the credentials are gone; never
account_inactive,                           retried
token_revoked,
token_expired,
no_text, msg_too_long,    MessageRejected   Slack refused the message itself: resending
invalid_arguments,                          the same text cannot succeed, but the channel
invalid_blocks                              is fine, so only that message is dropped
fatal_error,              TransportError    Slack's own failure: resend later
internal_error,
service_unavailable,
request_timeout,
update_failed, HTTP 5xx
anything else             TransportError    unknown: read as transient, like reading_for
========================  ================  ===============================================

Errors raised here never chain the SDK's exception: its response object holds the request
arguments, and with them the ``Authorization`` header.

``map_error(status=, body=, headers=, where=)`` has the shape of every shipped plugin's mapper
and the template's. There is no ``map_exception`` beside it, as Discord's and Teams' have:
slack-sdk raises ``SlackApiError`` holding the whole answer, which the provider hands to
``map_error`` as it is, and a network failure or timeout is read at the call, which knows its
deadline.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bridge_core import (
    ProviderError,
    RateLimited,
    TransportError,
    retry_after_header,
)
from bridge_slack.error_codes import ERROR_CODES

__all__ = ["RATE_LIMIT_CODES", "map_error"]

RATE_LIMIT_CODES = frozenset({"ratelimited", "rate_limited"})


def map_error(
    *, status: int, body: Any, headers: Mapping[str, Any] | None, where: str
) -> ProviderError:
    """The core error for Slack's refusal of ``where`` (``"Slack chat.postMessage to channel
    C1"``): the HTTP ``status``, the answer's JSON ``body`` (``{"ok": false, "error": code}``;
    anything else when Slack's edge answered) and its ``headers``."""
    raw = body.get("error") if isinstance(body, dict) else None
    code = raw if isinstance(raw, str) else None
    if status == 429 or code in RATE_LIMIT_CODES:
        retry_after = retry_after_header(headers)
        wait = f"retry after {retry_after:g} s" if retry_after is not None else "no Retry-After"
        return RateLimited(f"{where}: rate limited ({wait})", retry_after=retry_after)
    if code is not None and code in ERROR_CODES:
        error_class, meaning = ERROR_CODES[code]
        return error_class(f"{where} failed with {code}: {meaning}")
    if status >= 500 or code is None:
        return TransportError(f"{where} failed with HTTP {status}" + (f" ({code})" if code else ""))
    return TransportError(
        f"{where} failed with an error bridge-slack does not know, {code!r} (HTTP {status}); "
        "read as transient"
    )
