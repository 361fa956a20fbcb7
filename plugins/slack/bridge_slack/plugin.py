"""The entry point bridge-core loads (group ``bridge_core``, name ``slack``).

Declaring the provider type imports only ``bridge_slack.settings`` (pydantic and bridge-core):
slack-sdk and aiohttp load when the factory first builds a provider, so ``chatbridge providers``
and ``chatbridge check`` never pay for them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from bridge_core import ProviderContext, ProviderType, SendBudget, hookimpl
from bridge_slack.error_codes import ERROR_CODES
from bridge_slack.settings import CAPABILITIES, SLACK_BUDGET, SlackSettings

if TYPE_CHECKING:
    from bridge_slack.provider import SlackProvider

__all__ = ["create_provider", "provider_type", "register_budget_presets", "register_providers"]


def create_provider(settings: SlackSettings, context: ProviderContext) -> SlackProvider:
    """One Slack provider for a bot profile; connects to nothing until it first sends. The
    channels' read-back positions go to ``context.kv``."""
    from bridge_slack.provider import SlackProvider  # the SDK loads here, not at plugin load

    return SlackProvider(
        settings, profile=context.profile, kv=context.kv, api_base_url=context.api_base_url
    )


def provider_type() -> ProviderType[SlackSettings]:
    return ProviderType(
        name="slack",
        capabilities=CAPABILITIES,
        budget=SLACK_BUDGET,
        settings_model=SlackSettings,
        factory=create_provider,
        error_codes=ERROR_CODES,
        description="Slack via slack-sdk: Web API posts and edits, signed Events API inbound.",
    )


@hookimpl
def register_providers(register: Callable[[ProviderType[Any]], None]) -> None:
    register(provider_type())


@hookimpl
def register_budget_presets(register: Callable[[str, SendBudget], None]) -> None:
    register("slack", SLACK_BUDGET)
