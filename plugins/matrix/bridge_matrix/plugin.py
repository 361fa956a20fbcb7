"""The entry point bridge-core loads (group ``bridge_core``, name ``matrix``).

Declaring the provider type imports only ``bridge_matrix.settings`` (pydantic and bridge-core):
httpx and the client load when the factory first builds a provider, so ``chatbridge providers``
and ``chatbridge check`` never pay for them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from bridge_core import ProviderContext, ProviderType, SendBudget, hookimpl
from bridge_matrix.error_codes import ERROR_CODES
from bridge_matrix.settings import CAPABILITIES, MATRIX_BUDGET, MatrixSettings

if TYPE_CHECKING:
    from bridge_matrix.provider import MatrixProvider

__all__ = ["create_provider", "provider_type", "register_budget_presets", "register_providers"]


def create_provider(settings: MatrixSettings, context: ProviderContext) -> MatrixProvider:
    """Build one Matrix provider for a bot profile; its ``/sync`` position goes to
    ``context.kv``."""
    from bridge_matrix.provider import MatrixProvider  # httpx loads here, not at plugin load

    return MatrixProvider(
        settings, profile=context.profile, kv=context.kv, api_base_url=context.api_base_url
    )


def provider_type() -> ProviderType[MatrixSettings]:
    return ProviderType(
        name="matrix",
        capabilities=CAPABILITIES,
        budget=MATRIX_BUDGET,
        settings_model=MatrixSettings,
        factory=create_provider,
        error_codes=ERROR_CODES,
        description="Matrix (Synapse, any homeserver) over the client-server API; /sync inbound.",
    )


@hookimpl
def register_providers(register: Callable[[ProviderType[Any]], None]) -> None:
    register(provider_type())


@hookimpl
def register_budget_presets(register: Callable[[str, SendBudget], None]) -> None:
    register("matrix", MATRIX_BUDGET)
