"""bridge-teams: the Microsoft Teams provider for bridge-core, on botbuilder (Bot Connector)."""

from bridge_teams.auth import InvalidToken, OpenIdKeys, StaticKeys, TokenValidator
from bridge_teams.errors import CODE_TABLE, map_teams_error
from bridge_teams.inbound import (
    ReferenceStore,
    conversation_id,
    inbound_from_activity,
    split_conversation_id,
)
from bridge_teams.plugin import create_provider, provider_type
from bridge_teams.provider import CAPABILITIES, MAX_TEXT_BYTES, TeamsProvider, TeamsSettings
from bridge_teams.transport import (
    AdapterTransport,
    ClientCredentials,
    ConnectorTransport,
    TeamsTransport,
)

__all__ = [
    "CAPABILITIES",
    "CODE_TABLE",
    "MAX_TEXT_BYTES",
    "AdapterTransport",
    "ClientCredentials",
    "ConnectorTransport",
    "InvalidToken",
    "OpenIdKeys",
    "ReferenceStore",
    "StaticKeys",
    "TeamsProvider",
    "TeamsSettings",
    "TeamsTransport",
    "TokenValidator",
    "conversation_id",
    "create_provider",
    "inbound_from_activity",
    "map_teams_error",
    "provider_type",
    "split_conversation_id",
]
