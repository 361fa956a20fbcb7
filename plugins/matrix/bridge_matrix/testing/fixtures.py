"""Pytest fixtures on a real homeserver: ``synapse`` (one for the whole session), ``people``
(the session's accounts) and ``room`` (a fresh room they share), and ``MemoryKV``.

Import them into a ``conftest.py`` (``from bridge_matrix.testing.fixtures import people, room,
synapse``). Without
``matrix-synapse`` installed the tests that use it skip, and fail instead when
``BRIDGE_REQUIRE_SERVICES=1`` (as in CI), so CI can never pass by skipping them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from bridge_core.testing import services
from bridge_matrix.testing.synapse import (
    MatrixUser,
    Synapse,
    SynapseError,
    start_synapse,
    synapse_installed,
)

__all__ = ["MemoryKV", "People", "people", "room", "synapse"]


class MemoryKV:
    """The core's ``KeyValueStore`` protocol over a dict (what the runtime lends providers)."""

    def __init__(self) -> None:
        self.data: dict[tuple[str, str], bytes] = {}

    async def get(self, namespace: str, key: str) -> bytes | None:
        return self.data.get((namespace, key))

    async def put(self, namespace: str, key: str, value: bytes) -> None:
        self.data[(namespace, key)] = value

    async def delete(self, namespace: str, key: str) -> None:
        self.data.pop((namespace, key), None)


@dataclass(frozen=True)
class People:
    """The session's accounts: the bridge's bot, a person who writes to it, and another bot that
    posts notices. None has a message rate limit unless a test sets one."""

    bot: MatrixUser
    person: MatrixUser
    other_bot: MatrixUser


@pytest.fixture(scope="session")
def synapse(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synapse]:
    """A running Synapse on a free loopback port, SQLite in a temp folder, stopped at the end."""
    if not synapse_installed():
        services.service_unavailable("Synapse (pip install 'bridge-matrix[test]')")
    try:
        server = start_synapse(tmp_path_factory.mktemp("synapse"))
    except SynapseError as exc:
        services.service_unavailable(f"a startable Synapse ({exc})")
        raise  # service_unavailable skips or fails; this is never reached
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def people(synapse: Synapse) -> People:
    bot = synapse.register("bridge-bot")
    person = synapse.register("alice")
    other = synapse.register("other-bot")
    for user in (bot, person, other):
        synapse.lift_ratelimit(user)
    return People(bot=bot, person=person, other_bot=other)


@pytest.fixture
def room(synapse: Synapse, people: People) -> str:
    """A fresh room the person created and both bots joined."""
    return synapse.create_room(people.person, invite=(people.bot, people.other_bot))
