"""What the agent socket needs from the gateway (``AgentHost``), how it is set up
(``AgentSocketSettings``), and what it counts (``SocketCounts``, ``AgentSockets.statistics()``'s
source): shared by ``agent_socket`` (the endpoint) and ``agent_connection`` (one connection).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import bridge_core.agent.protocol as p
from bridge_core.events import FleetEvent
from bridge_core.ledger import Obligation
from bridge_core.runtime.channel import ChannelRuntime

__all__ = ["AgentHost", "AgentSocketSettings", "SocketCounts"]


class AgentHost(Protocol):
    """What the socket needs from the gateway."""

    gateway_id: str

    @property
    def accepting(self) -> bool: ...

    def agent_channel(self, name: str) -> ChannelRuntime | None:
        """The configured channel ``name`` (with its conversation log), or ``None``."""

    async def accept_events(self, events: Sequence[FleetEvent]) -> None: ...

    def send_recorded_soon(self, channel: ChannelRuntime, row: Obligation) -> bool:
        """Send a recorded reply in the gateway's own tasks (False, and nothing started, while
        it is not serving)."""


@dataclass(frozen=True, slots=True)
class AgentSocketSettings:
    api_token: str | None = None
    agent_tokens: Mapping[str, str] = field(default_factory=dict)
    """Agent name to its bearer token."""
    max_message_bytes: int = p.MAX_MESSAGE_BYTES
    hello_timeout: float = 10.0
    max_bad_messages: int = 16
    ping_interval: float = 10.0
    """WebSocket pings; a peer that misses a pong for this long is a dropped connection."""
    settle: float = 1.0
    heartbeat: float = 1.0
    expiry: float | None = None
    lookback: float = 3600.0
    drain_timeout: float = 10.0


@dataclass(slots=True)
class SocketCounts:
    """The counters the agent socket and its connections increment; ``AgentSockets.statistics()``
    is their snapshot."""

    connections: int = 0
    refused: int = 0
    turns_sent: int = 0
    answers_recorded: int = 0
    errors_sent: int = 0
    closed_for_garbage: int = 0
    graceful_closes: int = 0
    drops: int = 0
