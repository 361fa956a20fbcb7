"""Discord's documented error codes, each read as a core error (``ERROR_CODES``).

Only bridge-core is imported here, never the platform's SDK: the provider type declares the table
(``ProviderType(error_codes=ERROR_CODES)``), so the documentation lists it from the provider
registry, and ``bridge_discord.errors`` reads answers with it.
"""

from __future__ import annotations

from bridge_core import ErrorCodeTable, Forbidden, MessageRejected, NotFound, Unreachable

__all__ = ["ERROR_CODES"]


ERROR_CODES: ErrorCodeTable[int] = ErrorCodeTable(
    "Discord",
    {
        10003: (Unreachable, "Unknown Channel: the channel was deleted or the id is wrong"),
        10008: (NotFound, "Unknown Message: the message was deleted"),
        10015: (Unreachable, "Unknown Webhook"),
        30046: (NotFound, "too many edits to a message older than an hour; post a new one"),
        40005: (MessageRejected, "Request entity too large: the message body is over the limit"),
        50001: (Forbidden, "Missing Access: the bot cannot see the channel"),
        50006: (MessageRejected, "Cannot send an empty message"),
        50013: (Forbidden, "Missing Permissions: the bot may not send in the channel"),
        50035: (MessageRejected, "Invalid Form Body: Discord rejected the message as sent"),
        50083: (Forbidden, "the thread is archived"),
        50109: (MessageRejected, "the request body is not valid JSON"),
    },
    source="the numeric ``code`` of an error body",
)
