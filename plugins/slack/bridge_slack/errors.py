"""Slack's answers read as the core's error taxonomy.

Slack refuses with HTTP 200 and ``{"ok": false, "error": "<code>"}``, rate-limits with HTTP 429,
``Retry-After`` and ``error: "ratelimited"``, and fails at its edge with 5xx pages that are not
JSON. ``SLACK_ERRORS`` reads each documented code (PLATFORMS.md; ADR 0042 has the reasoning):

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
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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

__all__ = ["RATE_LIMIT_CODES", "SLACK_ERRORS", "map_slack_error"]

RATE_LIMIT_CODES = frozenset({"ratelimited", "rate_limited"})

_AUTH = "check the profile's bot_token (a bot token starting xoxb-, not revoked)"
_ACCESS = "invite the bot to the channel, or restore what was removed"

SLACK_ERRORS: Mapping[str, tuple[type[ProviderError], str]] = {
    "message_not_found": (NotFound, "the message was deleted"),
    "cant_update_message": (NotFound, "the message cannot be edited by this bot"),
    "edit_window_closed": (NotFound, "the message is too old to edit"),
    "thread_not_found": (NotFound, "the thread no longer exists"),
    "message_not_in_streaming_state": (NotFound, "the streamed message's stream has ended"),
    "not_in_channel": (Forbidden, f"the bot is not a member of the channel: {_ACCESS}"),
    # Also a private channel the bot was removed from: re-inviting it must bring replies back.
    "channel_not_found": (
        Forbidden,
        f"the channel does not exist or the bot cannot see it (a private channel): {_ACCESS}",
    ),
    "is_archived": (Forbidden, "the channel is archived: unarchive it to post again"),
    "is_inactive": (Forbidden, "the channel is archived or frozen"),
    "no_permission": (Forbidden, "the workspace does not let the bot post here"),
    "missing_scope": (Forbidden, "the app lacks a scope (chat:write): reinstall it with it"),
    "restricted_action": (Forbidden, "a workspace preference prevents the bot from posting"),
    "ekm_access_denied": (Forbidden, "administrators suspended the ability to post"),
    "not_authed": (Unreachable, f"no token was sent: {_AUTH}"),
    "invalid_auth": (Unreachable, f"the token was refused: {_AUTH}"),
    "account_inactive": (Unreachable, f"the bot's account is deactivated: {_AUTH}"),
    "token_revoked": (Unreachable, f"the token was revoked: {_AUTH}"),
    "token_expired": (Unreachable, f"the token expired: {_AUTH}"),
    "no_text": (MessageRejected, "the message had no text"),
    "msg_too_long": (MessageRejected, "the message was over Slack's 40,000 characters"),
    "invalid_arguments": (MessageRejected, "Slack refused the request's arguments"),
    "invalid_blocks": (MessageRejected, "Slack refused the message's blocks"),
    "fatal_error": (TransportError, "Slack failed internally; resend later"),
    "internal_error": (TransportError, "Slack failed internally; resend later"),
    "service_unavailable": (TransportError, "Slack is unavailable; resend later"),
    "request_timeout": (TransportError, "Slack timed out; resend later"),
    "update_failed": (TransportError, "Slack failed to apply the edit; resend later"),
}


def map_slack_error(
    *,
    method: str,
    channel: str | None,
    status: int,
    code: str | None,
    headers: Mapping[str, Any] | None,
) -> ProviderError:
    """The core error for a refused Slack API call (HTTP ``status``, ``error`` ``code``)."""
    where = f"Slack {method}" + (f" to channel {channel}" if channel else "")
    if status == 429 or code in RATE_LIMIT_CODES:
        retry_after = retry_after_header(headers)
        wait = f"retry after {retry_after:g} s" if retry_after is not None else "no Retry-After"
        return RateLimited(f"{where}: rate limited ({wait})", retry_after=retry_after)
    if code is not None and code in SLACK_ERRORS:
        error_class, meaning = SLACK_ERRORS[code]
        return error_class(f"{where} failed with {code}: {meaning}")
    if status >= 500 or code is None:
        return TransportError(f"{where} failed with HTTP {status}" + (f" ({code})" if code else ""))
    return TransportError(
        f"{where} failed with an error bridge-slack does not know, {code!r} (HTTP {status}); "
        "read as transient"
    )
