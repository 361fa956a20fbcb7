from __future__ import annotations

from collections.abc import Iterator

import pytest
from fake_api import CHANNEL, FakeApi

# bridge-core's provider kit (bridge_core.testing) is a pytest plugin that bridge-core registers
# itself, so its fixtures (start_fake, fake_platform, ...) are available here without opting in.


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def fake_api() -> Iterator[FakeApi]:
    with FakeApi() as fake:
        fake.add_channel(CHANNEL)
        yield fake
