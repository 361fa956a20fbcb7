"""Test helpers for the Teams provider, reusable by anyone testing against the Bot Connector.

``FakeTeams`` serves the Bot Connector's REST API, the token service and the OpenID keys over
real local HTTP, built on the core's ``bridge_core.testing.FakePlatform``, and signs inbound
activities as the Bot Framework does (``new_signing_key``); start it with the core kit's
``start_fake`` fixture or as a context manager.

Importing this package imports PyJWT and cryptography (the fake's signing), never botbuilder.
"""

from __future__ import annotations

from bridge_teams.testing.fake_teams import (
    MAX_PAYLOAD_BYTES,
    TEAMS_WINDOWS,
    FakeTeams,
    FakeTeamsConversation,
    new_conversation_id,
    new_signing_key,
)

__all__ = [
    "MAX_PAYLOAD_BYTES",
    "TEAMS_WINDOWS",
    "FakeTeams",
    "FakeTeamsConversation",
    "new_conversation_id",
    "new_signing_key",
]
