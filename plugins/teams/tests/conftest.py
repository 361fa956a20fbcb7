from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator

import pytest
from bridge_teams import TeamsProvider, TeamsSettings
from bridge_teams.testing.fake_teams import FakeTeams, new_signing_key
from cryptography.hazmat.primitives.asymmetric import rsa

CHANNEL = "19:general0000@thread.tacv2"


class DictStore:
    """A KeyValueStore in a dict, shared by providers built in one test (a "restart")."""

    def __init__(self) -> None:
        self.data: dict[tuple[str, str], bytes] = {}

    async def get(self, namespace: str, key: str) -> bytes | None:
        return self.data.get((namespace, key))

    async def put(self, namespace: str, key: str, value: bytes) -> None:
        self.data[(namespace, key)] = value

    async def delete(self, namespace: str, key: str) -> None:
        self.data.pop((namespace, key), None)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def channel() -> str:
    return CHANNEL


@pytest.fixture(scope="session")
def signing_key() -> rsa.RSAPrivateKey:
    return new_signing_key()


@pytest.fixture(scope="session")
def foreign_key() -> rsa.RSAPrivateKey:
    return new_signing_key()


@pytest.fixture
def fake(signing_key: rsa.RSAPrivateKey) -> Iterator[FakeTeams]:
    with FakeTeams(signing_key=signing_key) as server:
        server.add_conversation(CHANNEL)
        yield server


def settings_for(fake: FakeTeams, **overrides: object) -> TeamsSettings:
    values: dict[str, object] = {
        "app_id": fake.app_id,
        "app_password": fake.app_password,
        "service_url": fake.service_url,
        "token_url": fake.token_url,
        "openid_metadata_url": fake.openid_url,
        "call_deadline": 2.0,
    }
    values.update(overrides)
    return TeamsSettings.model_validate(values)


@pytest.fixture
def make_settings() -> Callable[..., TeamsSettings]:
    return settings_for


@pytest.fixture
def kv() -> DictStore:
    return DictStore()


@pytest.fixture
async def provider(fake: FakeTeams, kv: DictStore) -> AsyncIterator[TeamsProvider]:
    async with TeamsProvider(settings_for(fake), profile="test", kv=kv) as instance:
        assert isinstance(instance, TeamsProvider)
        yield instance
