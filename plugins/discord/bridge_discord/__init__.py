"""bridge-discord: the Discord provider plugin for bridge-core, on discord.py.

Installed, it registers the provider type ``discord`` through the ``bridge_core`` entry point
(``bridge_discord.plugin``). See ``DiscordSettings`` for a profile's settings.

The names that need discord.py (``DiscordProvider``, ``map_error``, ``map_exception``,
``inbound_from_message``) are imported on first use, so loading the plugin to list providers or
check a config does not import the SDK. ``bridge_discord.testing`` has a fake Discord for tests.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from typing import TYPE_CHECKING, Any

if sys.version_info < (3, 13):
    with warnings.catch_warnings():
        # discord.py imports audioop for voice, deprecated since Python 3.11; the warning would
        # fail any host that turns warnings into errors (pytest with filterwarnings=error) when
        # discord.py first loads. Importing the (small, C) module here, quietly, means discord.py
        # finds it already loaded, whichever of this package's modules imports discord.py first.
        warnings.filterwarnings("ignore", message=".*audioop.*", category=DeprecationWarning)
        import audioop  # noqa: F401

from bridge_discord.error_codes import ERROR_CODES
from bridge_discord.plugin import create_provider, provider_type
from bridge_discord.settings import CAPABILITIES, DISCORD_BUDGET, MAX_LENGTH, DiscordSettings

if TYPE_CHECKING:
    from bridge_discord.errors import map_error, map_exception
    from bridge_discord.inbound import inbound_from_message
    from bridge_discord.provider import DiscordProvider

__all__ = [
    "CAPABILITIES",
    "DISCORD_BUDGET",
    "ERROR_CODES",
    "MAX_LENGTH",
    "DiscordProvider",
    "DiscordSettings",
    "create_provider",
    "inbound_from_message",
    "map_error",
    "map_exception",
    "provider_type",
]

_SDK_NAMES = {
    "DiscordProvider": "bridge_discord.provider",
    "inbound_from_message": "bridge_discord.inbound",
    "map_error": "bridge_discord.errors",
    "map_exception": "bridge_discord.errors",
}


def __getattr__(name: str) -> Any:
    module = _SDK_NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'bridge_discord' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
