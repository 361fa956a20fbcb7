from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator

import pytest
from bridge_discord import DiscordProvider, DiscordSettings
from bridge_discord.testing.fake_discord import FakeDiscord

CHANNEL = 111_111_111_111_111_111
THREAD = 222_222_222_222_222_222


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # discord.py needs asyncio


@pytest.fixture
def channel() -> int:
    return CHANNEL


@pytest.fixture
def thread() -> int:
    return THREAD


@pytest.fixture
def fake() -> Iterator[FakeDiscord]:
    with FakeDiscord() as server:
        server.add_channel(CHANNEL)
        server.add_thread(THREAD, parent_id=CHANNEL)
        yield server


@pytest.fixture
def make_settings() -> Callable[..., DiscordSettings]:
    return settings_for


def settings_for(fake: FakeDiscord, **overrides: object) -> DiscordSettings:
    values: dict[str, object] = {
        "token": fake.token,
        "api_base_url": fake.api_base,
        "gateway_url": fake.gateway_url,
        "call_deadline": 5.0,
    }
    values.update(overrides)
    return DiscordSettings.model_validate(values)


@pytest.fixture
async def provider(fake: FakeDiscord) -> AsyncIterator[DiscordProvider]:
    async with DiscordProvider(settings_for(fake), profile="test") as instance:
        assert isinstance(instance, DiscordProvider)
        yield instance
