from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from bridge_matrix import MatrixProvider, MatrixSettings
from bridge_matrix.testing import FaultProxy, MatrixUser, Synapse
from bridge_matrix.testing.fixtures import People, people, room, synapse

__all__ = ["people", "room", "synapse"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def proxy(synapse: Synapse) -> Iterator[FaultProxy]:
    with FaultProxy(synapse.base_url) as running:
        yield running


def settings_for(base_url: str, user: MatrixUser, **overrides: object) -> MatrixSettings:
    values: dict[str, object] = {
        "homeserver_url": base_url,
        "user_id": user.user_id,
        "access_token": user.access_token,
        "device_id": user.device_id,
        "call_deadline": 5.0,
    }
    values.update(overrides)
    return MatrixSettings.model_validate(values)


@pytest.fixture
def make_settings() -> object:
    return settings_for


@pytest.fixture
async def provider(synapse: Synapse, people: People) -> AsyncIterator[MatrixProvider]:
    async with MatrixProvider(settings_for(synapse.base_url, people.bot), profile="test") as p:
        assert isinstance(p, MatrixProvider)
        yield p
