"""Teams's documented error codes, each read as a core error (``ERROR_CODES``).

Only bridge-core is imported here, never the platform's SDK: the provider type declares the table
(``ProviderType(error_codes=ERROR_CODES)``), so the documentation lists it from the provider
registry, and ``bridge_teams.errors`` reads answers with it.
"""

from __future__ import annotations

from bridge_core import ErrorCodeTable, Forbidden, MessageRejected, NotFound, Unreachable

__all__ = ["ERROR_CODES"]


ERROR_CODES: ErrorCodeTable[str] = ErrorCodeTable(
    "Teams",
    {
        "BotDisabledByAdmin": (Unreachable, "an admin disabled the bot"),
        "ConversationBlockedByUser": (Unreachable, "the user blocked the bot"),
        "BotNotInConversationRoster": (Forbidden, "the bot is not a member of the conversation"),
        "NotEnoughPermissions": (Forbidden, "the bot lacks permission in the conversation"),
        "ActivityNotFoundInConversation": (NotFound, "the message was deleted"),
        "ConversationNotFound": (Unreachable, "the conversation does not exist"),
        "MessageSizeTooBig": (MessageRejected, "the message is over Teams' size limit"),
    },
    source="the ``error.code`` of a Bot Connector error body",
)
