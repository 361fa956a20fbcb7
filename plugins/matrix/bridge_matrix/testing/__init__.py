"""Test helpers for the Matrix provider, reusable by third-party authors.

``start_synapse`` runs a throw-away Synapse (``pip install 'bridge-matrix[test]'``), and
``bridge_matrix.testing.fixtures`` offers it as a session-scoped pytest fixture::

    # conftest.py
    from bridge_matrix.testing.fixtures import synapse  # noqa: F401  (the fixture)

    def test_something(synapse):
        bot = synapse.register()
        ...

``FaultProxy`` sits in front of it to answer one request with a scripted fault.
``FakeHomeserver`` serves ``/sync`` and ``/messages`` alone, for what a real server cannot be made
to show cheaply (a gap of exactly 1,000 events, one room's history refused).
"""

from __future__ import annotations

from bridge_matrix.testing.fake_homeserver import FakeHomeserver, FakeRoomEvent
from bridge_matrix.testing.faults import FaultProxy, ScriptedReply
from bridge_matrix.testing.synapse import (
    MatrixUser,
    Synapse,
    SynapseError,
    free_port,
    start_synapse,
    synapse_installed,
)

__all__ = [
    "FakeHomeserver",
    "FakeRoomEvent",
    "FaultProxy",
    "MatrixUser",
    "ScriptedReply",
    "Synapse",
    "SynapseError",
    "free_port",
    "start_synapse",
    "synapse_installed",
]
