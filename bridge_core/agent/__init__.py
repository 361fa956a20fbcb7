"""Agents as their own processes: the Python agent SDK and the socket protocol it speaks.

::

    from bridge_core.agent import connect

    async with connect("ws://127.0.0.1:8787/v1/agents", token=..., group="support",
                       channels=["ops"]) as session:
        async for turn in session:
            await turn.reply(await my_llm(turn.text, turn.history))

``bridge_core.agent.protocol`` names and parses the messages of ``/v1/agents`` (documented for
other languages by ``docs/agent-protocol.schema.json``). This package imports only the standard
library, anyio and wsproto: an agent process does not load the gateway (a test checks it).
See ``session`` for reconnection and the exception hierarchy.
"""

from bridge_core.agent.protocol import PROTOCOL_VERSION, Ack, HistoryEntry, ProtocolError
from bridge_core.agent.session import (
    AgentError,
    Refused,
    Rejected,
    Session,
    Turn,
    TurnLost,
    connect,
)

__all__ = [
    "PROTOCOL_VERSION",
    "Ack",
    "AgentError",
    "HistoryEntry",
    "ProtocolError",
    "Refused",
    "Rejected",
    "Session",
    "Turn",
    "TurnLost",
    "connect",
]
