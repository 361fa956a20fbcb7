"""What the ``discord`` provider type declares: its settings model and capabilities.

Only pydantic and bridge-core are imported here, never discord.py or aiohttp: the plugin module
(``bridge_discord.plugin``) declares the provider type from this module alone, so listing
providers or checking a config costs no SDK import. ``bridge_discord.provider`` re-exports these
names.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from bridge_core import Capabilities, LengthUnit

__all__ = ["CAPABILITIES", "DEFAULT_API_BASE", "MAX_LENGTH", "DiscordSettings"]

DEFAULT_API_BASE = "https://discord.com/api/v10"

MAX_LENGTH = 2000
# Discord documents 2,000 "characters" without saying which; UTF-16 code units are never fewer
# than code points, so measuring in them can only err on the safe side (ADR 0045).
CAPABILITIES = Capabilities(
    edit=True,
    max_length=MAX_LENGTH,
    length_unit=LengthUnit.UTF16,
    threads=True,
    inbound=True,
    probe=True,
)


class DiscordSettings(BaseModel):
    """A Discord bot profile's ``settings`` table."""

    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)

    token: SecretStr = Field(description="The bot token (put it in config as an env reference).")
    api_base_url: str = Field(
        DEFAULT_API_BASE, description="REST API base, for proxies and tests; versioned path."
    )
    gateway_url: str | None = Field(
        None,
        description="Gateway websocket URL; None uses discord.py's (wss://gateway.discord.gg).",
    )
    call_deadline: float = Field(
        15.0,
        gt=0,
        le=120,
        description="Longest one post or edit may take, including discord.py's absorbed waits.",
    )
    inbound: bool = Field(False, description="Connect to the gateway and deliver user messages.")
    message_content_intent: bool = Field(
        True, description="Ask for the privileged message-content intent when inbound is on."
    )
