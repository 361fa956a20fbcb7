"""The entry point bridge-core loads (group ``bridge_core``, name ``discord``).

Declaring the provider type imports only ``bridge_discord.settings`` (pydantic and bridge-core):
discord.py loads when the factory first builds a provider, so ``chatbridge providers`` and
``chatbridge check`` never pay for it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from bridge_core import ProviderContext, ProviderType, SendBudget, hookimpl
from bridge_discord.error_codes import ERROR_CODES
from bridge_discord.settings import CAPABILITIES, DISCORD_BUDGET, DiscordSettings

if TYPE_CHECKING:
    from bridge_discord.provider import DiscordProvider

__all__ = ["create_provider", "provider_type", "register_budget_presets", "register_providers"]


def create_provider(settings: DiscordSettings, context: ProviderContext) -> DiscordProvider:
    """Build one Discord provider instance for a bot profile; the channels' backfill positions
    go to ``context.kv``."""
    from bridge_discord.provider import DiscordProvider  # the SDK loads here, not at plugin load

    return DiscordProvider(
        settings, profile=context.profile, kv=context.kv, api_base_url=context.api_base_url
    )


def provider_type() -> ProviderType[DiscordSettings]:
    return ProviderType(
        name="discord",
        capabilities=CAPABILITIES,
        budget=DISCORD_BUDGET,
        settings_model=DiscordSettings,
        factory=create_provider,
        error_codes=ERROR_CODES,
        description="Discord via discord.py: REST sends with idempotent creates, gateway inbound.",
    )


@hookimpl
def register_providers(register: Callable[[ProviderType[Any]], None]) -> None:
    register(provider_type())


@hookimpl
def register_budget_presets(register: Callable[[str, SendBudget], None]) -> None:
    register("discord", DISCORD_BUDGET)
