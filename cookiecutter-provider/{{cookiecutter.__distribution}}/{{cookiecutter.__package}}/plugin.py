"""The module bridge-core loads through the ``bridge_core`` entry point.

It declares the provider without connecting to anything: name, capabilities, budget, settings
model and a factory. The gateway calls the factory once per bot profile. It also names the
budget as a preset, so a profile of any provider can say
``budget = "{{ cookiecutter.__provider }}"``.

bridge-core loads every installed plugin to list providers or check a config, so this module
imports only ``settings`` (pydantic and bridge-core); the factory imports the provider, and with
it httpx or your platform's SDK, when it first builds one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from bridge_core import ProviderContext, ProviderType, SendBudget, hookimpl

from {{ cookiecutter.__package }}.error_codes import ERROR_CODES
from {{ cookiecutter.__package }}.settings import (
{%- for name in ["CAPABILITIES", cookiecutter.__env_prefix ~ "_BUDGET"] | sort(case_sensitive=True) %}
    {{ name }},
{%- endfor %}
    {{ cookiecutter.__class_prefix }}Settings,
)

if TYPE_CHECKING:
    from {{ cookiecutter.__package }}.provider import (
        {{ cookiecutter.__class_prefix }}Provider,
    )

__all__ = [
    "create_provider",
    "provider_type",
    "register_budget_presets",
    "register_providers",
]


def create_provider(
    settings: {{ cookiecutter.__class_prefix }}Settings,
    context: ProviderContext,
) -> {{ cookiecutter.__class_prefix }}Provider:
    """Build one provider instance for a bot profile."""
    # Imported here, not at the top: the provider loads the client, and with it httpx.
    from {{ cookiecutter.__package }}.provider import (
        {{ cookiecutter.__class_prefix }}Provider,
    )

    return {{ cookiecutter.__class_prefix }}Provider(
        settings,
        profile=context.profile,
        api_base_url=context.api_base_url,
    )


def provider_type() -> ProviderType[{{ cookiecutter.__class_prefix }}Settings]:
    return ProviderType(
        name="{{ cookiecutter.__provider }}",
        capabilities=CAPABILITIES,
        budget={{ cookiecutter.__env_prefix }}_BUDGET,
        settings_model={{ cookiecutter.__class_prefix }}Settings,
        factory=create_provider,
        error_codes=ERROR_CODES,
        description="{{ cookiecutter.provider_name }} over its REST API",
    )


@hookimpl
def register_providers(register: Callable[[ProviderType[Any]], None]) -> None:
    register(provider_type())


@hookimpl
def register_budget_presets(register: Callable[[str, SendBudget], None]) -> None:
    register("{{ cookiecutter.__provider }}", {{ cookiecutter.__env_prefix }}_BUDGET)
