"""One Socket Mode websocket: its frames read in a task, what Slack said about it kept as state.

``SlackSocketMode`` (``bridge_slack.socket_mode``) holds one of these, two while Slack rotates
the connection. ``read`` runs in the session's task group until the socket ends and never
raises (but for cancellation): ``hello`` and ``disconnect`` become state (``greeted``,
``reason``, ``ended``, with the events ``settled`` and ``changed`` to wait on); every other JSON
object goes to the session's handler, which acknowledges it on this socket with ``acknowledge``.
``close`` waits for an envelope the handler is still holding, so its acknowledgement still goes
out on the socket it came on, then closes the socket; it is shielded, so a cancelled session
still closes every socket it opened.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import anyio

__all__ = ["SocketConnection"]

logger = logging.getLogger("bridge_slack.socket_mode")

Handler = Callable[["SocketConnection", dict[str, Any]], Awaitable[None]]


class SocketConnection:
    """A connected Socket Mode websocket, ``number`` counting from 1 in its session."""

    def __init__(
        self, socket: aiohttp.ClientWebSocketResponse, *, profile: str, number: int
    ) -> None:
        self._socket = socket
        self._profile = profile
        self.number = number
        self.greeted = False  # Slack's hello came
        self.reason: str | None = None  # the reason of Slack's first disconnect message
        self.ended = False  # the socket closed, was cut or failed
        self.settled = anyio.Event()  # hello, disconnect or the end, whichever comes first
        self.changed = anyio.Event()  # disconnect or the end
        self._busy = anyio.Lock()  # held while the handler has an envelope

    def __repr__(self) -> str:
        return f"SocketConnection(profile={self._profile!r}, number={self.number})"

    async def read(self, handle: Handler) -> None:
        """Read frames until the socket ends (or this task is cancelled)."""
        try:
            async for frame in self._socket:
                if frame.type is aiohttp.WSMsgType.ERROR:
                    break
                if frame.type is not aiohttp.WSMsgType.TEXT:
                    continue
                data = self._parse(frame.data)
                if data is None:
                    continue
                kind = data.get("type")
                if kind == "hello":
                    self.greeted = True
                    self.settled.set()
                elif kind == "disconnect":
                    if self.reason is None:
                        reason = data.get("reason")
                        self.reason = reason if isinstance(reason, str) else "unknown"
                    self.settled.set()
                    self.changed.set()
                else:
                    async with self._busy:
                        await handle(self, data)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            logger.info(
                "Slack profile %s: Socket Mode connection %d failed: %s: %s",
                self._profile,
                self.number,
                type(exc).__name__,
                exc,
            )
        # not on cancellation: a cancelled session must not take it for a lost socket
        self.ended = True
        self.settled.set()
        self.changed.set()

    async def acknowledge(self, envelope_id: str) -> None:
        await self._socket.send_json({"envelope_id": envelope_id})

    async def close(self) -> None:
        """Close the socket (shielded), after the envelope the handler may be holding."""
        with anyio.CancelScope(shield=True):
            async with self._busy:
                await self._socket.close()

    def _parse(self, raw: str) -> dict[str, Any] | None:
        try:
            data: Any = json.loads(raw)
        except (ValueError, RecursionError):
            logger.warning("Slack profile %s: a Socket Mode frame was not JSON", self._profile)
            return None
        return data if isinstance(data, dict) else None
