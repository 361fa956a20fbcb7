"""{{ cookiecutter.provider_name }}'s documented error codes, each read as a bridge-core error.

Only bridge-core is imported here, never httpx or your platform's SDK: the provider type declares
the table (``ProviderType(error_codes=ERROR_CODES)``), so bridge-core's documentation lists your
codes from the provider registry, and ``errors`` reads answers with it.

FILL IN: your platform's error codes (the ``code`` of an error body), what each one means to the
core, and a line saying why, which goes into the error's message.
"""

from __future__ import annotations

from bridge_core import (
    ErrorCodeTable,
    Forbidden,
    MessageRejected,
    NotFound,
    RateLimited,
    TransportError,
    Unreachable,
)

__all__ = ["ERROR_CODES"]

ERROR_CODES: ErrorCodeTable[str] = ErrorCodeTable(
    "{{ cookiecutter.provider_name }}",
    {
        "rate_limited": (RateLimited, "the platform asked the bot to slow down"),
        "message_not_found": (NotFound, "the message was deleted"),
        "not_in_channel": (Forbidden, "the bot is not a member of the channel"),
        "missing_permission": (Forbidden, "the bot may not post in the channel"),
        "channel_not_found": (Unreachable, "the channel does not exist"),
        "channel_archived": (Unreachable, "the channel is archived"),
        "bot_blocked": (Unreachable, "the user blocked the bot"),
        "token_revoked": (Unreachable, "the token was revoked: check the profile's token"),
        "not_authed": (Unreachable, "no token was sent: check the profile's token"),
        "text_too_long": (MessageRejected, "the message is over the platform's length limit"),
        "invalid_request": (MessageRejected, "the platform refused the request's body"),
        "internal_error": (TransportError, "the platform failed internally; resend later"),
        "service_unavailable": (TransportError, "the platform is unavailable; resend later"),
    },
    source='the ``code`` of an error body (``{"error": {"code": ...}}``)',
)
