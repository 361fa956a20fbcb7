"""Agent processes on the gateway's socket ``GET /v1/agents``: one group member per connection.

An agent process connects (bearer token: the API's or one of ``[api] agent_tokens``; without any
token configured, loopback peers only), says ``hello`` with an agent group and channels, and the
connection becomes one ``AgentGroupMember`` of each channel's conversation log: the same member
the gateway runs for an in-process agent, with its own id (``GROUP/NAME@GATEWAY:random``) and
its own ``since`` (the log's time of its join + settle). Ownership, takeover at a leave, orphans
and expiry are the log's fold (ADR 0030..0036), not anything of this module's; ADR 0037 records
how a connection maps onto it.

What one connection does once it is open (its turns, answers, streams, how it ends, bad input)
is ``bridge_core.runtime.agent_connection``; what both need from the gateway, their settings and
counters, ``bridge_core.runtime.agent_host``.
"""

from __future__ import annotations

import hmac
import ipaddress
from dataclasses import asdict, dataclass

import anyio
from aiohttp import web

from bridge_core.runtime.agent_connection import DECLINED, AgentConnection
from bridge_core.runtime.agent_host import AgentHost, AgentSocketSettings, SocketCounts

__all__ = [
    "DECLINED",
    "AgentConnection",
    "AgentHost",
    "AgentSocketSettings",
    "AgentSockets",
    "AgentSocketStatistics",
    "SocketCounts",
]


def _loopback(remote: str | None) -> bool:
    if remote is None:
        return False
    try:
        return ipaddress.ip_address(remote.split("%")[0]).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, slots=True)
class AgentSocketStatistics:
    """``AgentSockets.statistics()``: the counters since the gateway started, then the agent
    connections open when asked."""

    connections: int
    refused: int
    turns_sent: int
    answers_recorded: int
    errors_sent: int
    closed_for_garbage: int
    graceful_closes: int
    drops: int
    open_connections: int


class AgentSockets:
    """The gateway's agent connections; ``handle`` is the aiohttp handler of ``/v1/agents``."""

    def __init__(self, host: AgentHost, settings: AgentSocketSettings) -> None:
        self.host = host
        self.settings = settings
        self._counts = SocketCounts()
        self.connections: set[AgentConnection] = set()
        self._stopping = False

    def statistics(self) -> AgentSocketStatistics:
        return AgentSocketStatistics(**asdict(self._counts), open_connections=len(self.connections))

    def _refuse(self, status: int, message: str) -> web.Response:
        self._counts.refused += 1
        return web.json_response({"error": message}, status=status)

    def authenticate(self, request: web.Request) -> str | web.Response:
        """The agent's name (``api`` for the API token), or the refusal to answer with."""
        settings = self.settings
        if settings.api_token is None and not settings.agent_tokens:
            if not _loopback(request.remote):
                return self._refuse(
                    403,
                    "no token is configured, so the agent socket serves this machine only; set "
                    "[api] token or [api] agent_tokens",
                )
            return "local"
        given = request.headers.get("Authorization")
        if given is None:
            return self._refuse(401, "missing Authorization: Bearer <token> header")
        scheme, _, token = given.partition(" ")
        if scheme.lower() != "bearer" or not token:
            return self._refuse(401, "Authorization must be 'Bearer <token>'")
        raw = token.encode()
        found: str | None = None
        candidates = [("api", settings.api_token)] if settings.api_token else []
        candidates += list(settings.agent_tokens.items())
        for name, expected in candidates:
            # compare with every token (no early exit), so timing does not tell which matched
            if expected and hmac.compare_digest(raw, expected.encode()) and found is None:
                found = name
        if found is None:
            return self._refuse(403, "wrong bearer token for the agent socket")
        return found

    async def handle(self, request: web.Request) -> web.StreamResponse:
        identity = self.authenticate(request)
        if isinstance(identity, web.Response):
            return identity
        if self._stopping or not self.host.accepting:
            return self._refuse(503, "the gateway is starting or stopping; connect again shortly")
        if not web.WebSocketResponse(protocols=()).can_prepare(request).ok:
            return self._refuse(400, "GET /v1/agents is a WebSocket endpoint: send an upgrade")
        settings = self.settings
        ws = web.WebSocketResponse(
            heartbeat=settings.ping_interval,
            # frames a little past the protocol's limit are read and answered too_large; beyond
            # this hard limit the socket itself closes with 1009
            max_msg_size=4 * settings.max_message_bytes,
        )
        await ws.prepare(request)
        connection = AgentConnection(
            self.host,
            ws,
            settings=settings,
            counts=self._counts,
            agent=identity,
            remote=request.remote,
        )
        self._counts.connections += 1
        self.connections.add(connection)
        try:
            await connection.serve()
        finally:
            self.connections.discard(connection)
        return ws

    async def aclose(self) -> None:
        """Stop every connection gracefully: members finish what they hold, leave, and the
        sockets are closed with ``CLOSE_GOING_AWAY`` (the agents reconnect elsewhere)."""
        self._stopping = True
        async with anyio.create_task_group() as tg:
            for connection in list(self.connections):
                tg.start_soon(connection.shut_down)
