"""Slack's documented error codes, each read as a core error (``ERROR_CODES``).

Only bridge-core is imported here, never the platform's SDK: the provider type declares the table
(``ProviderType(error_codes=ERROR_CODES)``), so the documentation lists it from the provider
registry, and ``bridge_slack.errors`` reads answers with it.
"""

from __future__ import annotations

from bridge_core import (
    ErrorCodeTable,
    Forbidden,
    MessageRejected,
    NotFound,
    TransportError,
    Unreachable,
)

__all__ = ["ERROR_CODES"]

_AUTH = "check the profile's bot_token (a bot token starting xoxb-, not revoked)"
_ACCESS = "invite the bot to the channel, or restore what was removed"

ERROR_CODES: ErrorCodeTable[str] = ErrorCodeTable(
    "Slack",
    {
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
    },
    source='the ``error`` of a refused Web API call (``{"ok": false, "error": ...}``)',
)
