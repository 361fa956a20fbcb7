"""The provider kit as a pytest plugin, loaded automatically wherever bridge-core is installed
(the ``pytest11`` entry point ``bridge_core_testing``). Do not also list it in ``pytest_plugins``:
pytest would refuse the second load ("Module already imported so cannot be rewritten").

Fixtures:

- ``start_fake``: a function that starts any ``FakePlatform`` (or subclass) instance and stops
  it after the test: ``fake = start_fake(FakeDiscord(token=...))``;
- ``fake_platform``: a running bare ``FakePlatform`` to add routes to.

A plugin's own fakes come with their plugin's testing module (``bridge_slack.testing.fixtures``
offers ``fake_slack``).

Each fake serves real HTTP on 127.0.0.1 from its own thread, so it answers async clients on any
event loop and blocking clients alike.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest

from bridge_core.testing.fake_platform import FakePlatform

__all__ = ["fake_platform", "start_fake"]

# Before anything imports it, so the suite's failed asserts show pytest's detailed diffs.
pytest.register_assert_rewrite("bridge_core.testing.conformance")

FakeT = TypeVar("FakeT", bound=FakePlatform)


@pytest.fixture
def start_fake() -> Iterator[Callable[[FakeT], FakeT]]:
    """Start fakes for this test; every one started is stopped at teardown."""
    started: list[FakePlatform] = []

    def start(fake: FakeT) -> FakeT:
        fake.start()
        started.append(fake)
        return fake

    yield start
    for fake in reversed(started):
        fake.stop()


@pytest.fixture
def fake_platform(start_fake: Callable[[FakePlatform], FakePlatform]) -> FakePlatform:
    return start_fake(FakePlatform())
