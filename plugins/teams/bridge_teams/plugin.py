"""The entry point bridge-core loads (group ``bridge_core``, name ``teams``).

Declaring the provider type imports only ``bridge_teams.settings`` (pydantic and bridge-core):
botbuilder, msrest and the rest load when the factory first builds a provider, so ``chatbridge
providers`` and ``chatbridge check`` never pay for them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from bridge_core import ProviderContext, ProviderType, SendBudget, hookimpl
from bridge_teams.error_codes import ERROR_CODES
from bridge_teams.settings import CAPABILITIES, TEAMS_BUDGET, TeamsSettings

if TYPE_CHECKING:
    from bridge_teams.provider import TeamsProvider

__all__ = ["create_provider", "provider_type", "register_budget_presets", "register_providers"]


def create_provider(settings: TeamsSettings, context: ProviderContext) -> TeamsProvider:
    """Build one Teams provider for a bot profile; conversation references go to ``context.kv``."""
    from bridge_teams.provider import TeamsProvider  # the SDK loads here, not at plugin load

    return TeamsProvider(
        settings, profile=context.profile, kv=context.kv, api_base_url=context.api_base_url
    )


def provider_type() -> ProviderType[TeamsSettings]:
    return ProviderType(
        name="teams",
        capabilities=CAPABILITIES,
        budget=TEAMS_BUDGET,
        settings_model=TeamsSettings,
        factory=create_provider,
        error_codes=ERROR_CODES,
        description="Microsoft Teams via the Bot Connector (botbuilder); JWT-checked inbound.",
    )


@hookimpl
def register_providers(register: Callable[[ProviderType[Any]], None]) -> None:
    register(provider_type())


@hookimpl
def register_budget_presets(register: Callable[[str, SendBudget], None]) -> None:
    register("teams", TEAMS_BUDGET)
