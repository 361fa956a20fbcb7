"""Helpers shared by the runtime tests (imported as ``from .conftest import ...``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel

from bridge_core.config import BridgeConfig, parse_config
from bridge_core.hookspecs import ProviderType
from bridge_core.plugins import ProviderRegistry, RegisteredProvider
from bridge_core.provider import UNLIMITED_BUDGET, ChatProvider

__all__ = ["anyio_backend", "builtin_plugins_only", "one_channel"]


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


@pytest.fixture
def anyio_backend() -> str:
    """The runtime's tests run on asyncio, as the gateway does (a module may ask for others)."""
    return "asyncio"


@pytest.fixture
def builtin_plugins_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """No installed plugin loads (``CHATBRIDGE_LOAD_PLUGINS=""``): loading every installed
    platform SDK costs seconds, and these tests need only the built-in console."""
    monkeypatch.setenv("CHATBRIDGE_LOAD_PLUGINS", "")
