"""bridge-teams: the Microsoft Teams provider plugin for bridge-core, on botbuilder.

Installed, it registers the provider type ``teams`` through the ``bridge_core`` entry point
(``bridge_teams.plugin``). See ``TeamsSettings`` for a profile's settings.

The names that need botbuilder, msrest, requests, aiohttp or PyJWT are imported on first use, so
loading the plugin to list providers or check a config does not import them.
``bridge_teams.testing`` has a fake Bot Connector for tests.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from bridge_teams.error_codes import ERROR_CODES
from bridge_teams.plugin import create_provider, provider_type
from bridge_teams.settings import CAPABILITIES, MAX_LENGTH, TEAMS_BUDGET, TeamsSettings

if TYPE_CHECKING:
    from bridge_teams.auth import InvalidToken, OpenIdKeys, StaticKeys, TokenValidator
    from bridge_teams.errors import map_error, map_exception
    from bridge_teams.inbound import (
        ReferenceStore,
        conversation_id,
        inbound_from_activity,
        split_conversation_id,
    )
    from bridge_teams.provider import TeamsProvider
    from bridge_teams.transport import (
        AdapterTransport,
        ClientCredentials,
        ConnectorTransport,
        TeamsTransport,
    )

__all__ = [
    "CAPABILITIES",
    "ERROR_CODES",
    "MAX_LENGTH",
    "TEAMS_BUDGET",
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
    "map_error",
    "map_exception",
    "provider_type",
    "split_conversation_id",
]

_SDK_NAMES = {
    "InvalidToken": "bridge_teams.auth",
    "OpenIdKeys": "bridge_teams.auth",
    "StaticKeys": "bridge_teams.auth",
    "TokenValidator": "bridge_teams.auth",
    "map_error": "bridge_teams.errors",
    "map_exception": "bridge_teams.errors",
    "ReferenceStore": "bridge_teams.inbound",
    "conversation_id": "bridge_teams.inbound",
    "inbound_from_activity": "bridge_teams.inbound",
    "split_conversation_id": "bridge_teams.inbound",
    "TeamsProvider": "bridge_teams.provider",
    "AdapterTransport": "bridge_teams.transport",
    "ClientCredentials": "bridge_teams.transport",
    "ConnectorTransport": "bridge_teams.transport",
    "TeamsTransport": "bridge_teams.transport",
}


def __getattr__(name: str) -> Any:
    module = _SDK_NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'bridge_teams' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
