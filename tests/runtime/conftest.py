"""Helpers shared by the runtime tests (imported as ``from .conftest import ...``)."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio.testing
from pydantic import BaseModel
from redis.asyncio import Redis

from bridge_core.config import BridgeConfig, parse_config
from bridge_core.hookspecs import ProviderType
from bridge_core.plugins import ProviderRegistry, RegisteredProvider
from bridge_core.provider import UNLIMITED_BUDGET, ChatProvider
from bridge_core.providers.console import ConsoleProvider, ConsoleSettings
from bridge_core.testing.services import require_redis

__all__ = ["anyio_backend", "builtin_plugins_only", "console", "one_channel", "prefix"]


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
def anyio_backend(request: pytest.FixtureRequest) -> object:
    """The runtime's tests run on asyncio, as the gateway does; a test parametrized with
    ``anyio_backend="virtual"`` (indirect) runs on trio with a fresh mock clock."""
    if getattr(request, "param", None) == "virtual":
        return ("trio", {"clock": trio.testing.MockClock(autojump_threshold=0)})
    return "asyncio"


@pytest.fixture
def builtin_plugins_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """No installed plugin loads (``CHATBRIDGE_LOAD_PLUGINS=""``): loading every installed
    platform SDK costs seconds, and these tests need only the built-in console."""
    monkeypatch.setenv("CHATBRIDGE_LOAD_PLUGINS", "")


@pytest.fixture
def console(tmp_path: Path) -> ConsoleProvider:
    """A console provider writing its transcript to ``t.jsonl`` and nothing to the terminal."""
    return ConsoleProvider(
        ConsoleSettings(transcript=tmp_path / "t.jsonl", output="none"), run_prefix="r"
    )


@pytest.fixture
async def prefix() -> AsyncIterator[str]:
    """A fresh Redis key prefix; every key under it is deleted after the test."""
    url = require_redis()
    name = f"test-{secrets.token_hex(4)}"
    yield name
    redis = Redis.from_url(url)
    try:
        keys = [key async for key in redis.scan_iter(match=f"{name}:*")]
        if keys:
            await redis.delete(*keys)
    finally:
        await redis.aclose()
