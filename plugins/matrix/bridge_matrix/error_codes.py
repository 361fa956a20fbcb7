"""Matrix's documented error codes, each read as a core error (``ERROR_CODES``).

Only bridge-core is imported here, never the platform's SDK: the provider type declares the table
(``ProviderType(error_codes=ERROR_CODES)``), so the documentation lists it from the provider
registry, and ``bridge_matrix.errors`` reads answers with it.
"""

from __future__ import annotations

from bridge_core import (
    ErrorCodeTable,
    Forbidden,
    MessageRejected,
    NotFound,
    RateLimited,
    Unreachable,
)

__all__ = ["ERROR_CODES"]


ERROR_CODES: ErrorCodeTable[str] = ErrorCodeTable(
    "Matrix",
    {
        # These two are read before the rest: the retry-after comes from the body or the header,
        # and a missing event means a repost only for an edit.
        "M_LIMIT_EXCEEDED": (RateLimited, "rate limited; retry_after_ms says for how long"),
        "M_NOT_FOUND": (NotFound, "the event to edit is gone (on a post: the room, Unreachable)"),
        "M_FORBIDDEN": (Forbidden, "the bot may not send there (kicked, banned, not joined)"),
        "M_GUEST_ACCESS_FORBIDDEN": (Forbidden, "the room does not admit guests"),
        "M_RESOURCE_LIMIT_EXCEEDED": (Forbidden, "the homeserver is over its user limit"),
        "M_UNKNOWN_TOKEN": (Unreachable, "the access token is unknown or was revoked"),
        "M_MISSING_TOKEN": (Unreachable, "no access token was sent"),
        "M_USER_DEACTIVATED": (Unreachable, "the bot's account is deactivated"),
        "M_UNRECOGNIZED": (Unreachable, "the homeserver does not know this endpoint"),
        "M_TOO_LARGE": (MessageRejected, "the event is over the homeserver's size limit"),
        "M_BAD_JSON": (MessageRejected, "the homeserver refused the event's JSON"),
        "M_NOT_JSON": (MessageRejected, "the request body is not JSON"),
        "M_INVALID_PARAM": (MessageRejected, "the homeserver refused a field of the event"),
    },
    source="the ``errcode`` of an error body",
)
