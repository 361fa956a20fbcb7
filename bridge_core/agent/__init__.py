"""Agents as their own processes: the socket protocol (``protocol``) and the Python agent SDK.

``bridge_core.agent.protocol`` names and parses the messages of ``/v1/agents`` (documented for
other languages by ``docs/agent-protocol.schema.json``). This package imports only the standard
library, anyio and wsproto, so an agent process does not load the gateway.
"""

from bridge_core.agent.protocol import PROTOCOL_VERSION, ProtocolError

__all__ = ["PROTOCOL_VERSION", "ProtocolError"]
