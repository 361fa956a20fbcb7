"""Helpers shared by the runtime tests (imported as ``from .conftest import ...``)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from bridge_core.config import BridgeConfig, parse_config
from bridge_core.hookspecs import ProviderType
from bridge_core.plugins import ProviderRegistry, RegisteredProvider
from bridge_core.provider import UNLIMITED_BUDGET, ChatProvider

__all__ = ["one_channel"]


class NoSettings(BaseModel):
    pass


def one_channel(tmp_path: Path, provider: type[ChatProvider]) -> BridgeConfig:
    """Channel "ops" (id C1) on a profile of ``provider`` (built with no arguments)."""
    kind = ProviderType(
        name=provider.name,
        capabilities=provider.capabilities,
        budget=UNLIMITED_BUDGET,
        settings_model=NoSettings,
        factory=lambda settings, context: provider(),
    )
    return parse_config(
        {
            "profiles": {"p": {"provider": provider.name}},
            "channels": {"ops": {"profile": "p", "channel_id": "C1"}},
            "stores": {"ledger": str(tmp_path / "bridge.sqlite3")},
        },
        providers=ProviderRegistry([RegisteredProvider(kind, "test", "0")]),
    )
