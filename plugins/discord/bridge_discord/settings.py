"""What the ``discord`` provider type declares: its settings model and capabilities.

Only pydantic and bridge-core are imported here, never discord.py or aiohttp: the plugin module
(``bridge_discord.plugin``) declares the provider type from this module alone, so listing
providers or checking a config costs no SDK import. ``bridge_discord.provider`` re-exports these
names.
"""

from __future__ import annotations

from pydantic import Field, SecretStr

from bridge_core import (
    Capabilities,
    LengthUnit,
    ProviderSettings,
    SendBudget,
    StreamingMode,
    Window,
)

__all__ = [
    "CAPABILITIES",
    "DEFAULT_API_BASE",
    "DISCORD_BUDGET",
    "MAX_LENGTH",
    "DiscordSettings",
]

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
    streaming=StreamingMode.EDIT,  # a streamed reply is one message, edited in place
)

# ADR 0007's Discord preset with the documented short window (PLATFORMS.md): Discord's observed 5
# messages per 5 s per channel is tighter than burst 5 + 1/s, and without the window discord.py
# would wait silently inside a call instead of the core's sender pacing ahead (ADR 0049).
DISCORD_BUDGET = SendBudget.hourly(burst=5, per_hour=3600, extra=(Window(5, 5.0),))


class DiscordSettings(ProviderSettings):
    """A Discord bot profile's ``settings`` table."""

    # Each field's docstring is its description (ProviderSettings reads it): the configuration
    # reference shows it, and a missing key's error quotes its first sentence.

    token: SecretStr
    """The bot token from the Discord developer portal, for REST sends and, with ``inbound``, the
    gateway."""
    api_base_url: str = DEFAULT_API_BASE
    """The base URL of Discord's REST API, with its version (``/api/v10``). Change it only for a
    proxy or a test's fake."""
    gateway_url: str | None = None
    """The websocket URL of Discord's gateway, used with ``inbound``. Not set: the one discord.py
    uses (``wss://gateway.discord.gg``). Change it only for a proxy or a test's fake."""
    call_deadline: float = Field(15.0, gt=0, le=120)
    """Seconds one call (a post, an edit, a probe: each one request; or the gateway's login) may
    take. A call with no answer by then fails as a transport error and the core's sender decides
    when to resend; a rate limit never waits inside a call (it fails at once as ``RateLimited``
    with Discord's retry-after)."""
    inbound: bool = False
    """Connect to Discord's gateway and hand what people write (in server channels, their threads,
    and direct messages) to the channel's agent. Off for a bot that only posts."""
    message_content_intent: bool = True
    """Ask for the privileged message-content intent when ``inbound`` is on; without it Discord
    gives the bot the text only of messages that mention it and of direct messages. Enable the
    intent for the bot in the developer portal too, or the gateway refuses to connect; set ``false``
    where you cannot."""
    backfill: bool = True
    """With ``inbound``, read back what people wrote while the gateway was not connected (a
    restart, a deploy, a dropped connection): for each channel the bot has heard someone in, the
    messages after the last one delivered, at most 1,000 per channel, when the next session
    starts. Needs the core's key-value store (kept beside the ledger); off, a message written
    while the gateway was down is never seen."""
