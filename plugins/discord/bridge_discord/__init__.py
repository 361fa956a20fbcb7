"""bridge-discord: the Discord provider for bridge-core, on discord.py."""

import warnings

with warnings.catch_warnings():
    # discord.py imports audioop for voice, deprecated since Python 3.11; the warning would fail
    # any host that turns warnings into errors (pytest with filterwarnings=error) at plugin load.
    warnings.filterwarnings("ignore", message=".*audioop.*", category=DeprecationWarning)
    import discord  # noqa: F401

from bridge_discord.errors import CODE_TABLE, map_discord_error
from bridge_discord.inbound import inbound_from_message
from bridge_discord.plugin import create_provider, provider_type
from bridge_discord.provider import CAPABILITIES, MAX_LENGTH, DiscordProvider, DiscordSettings

__all__ = [
    "CAPABILITIES",
    "CODE_TABLE",
    "MAX_LENGTH",
    "DiscordProvider",
    "DiscordSettings",
    "create_provider",
    "inbound_from_message",
    "map_discord_error",
    "provider_type",
]
