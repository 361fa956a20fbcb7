"""The Socket Mode half of the fake Slack: ``apps.connections.open`` and its websocket.

``FakeSocketMode`` is ``FakeSlack``'s base class (use ``FakeSlack``; this half alone serves no
Web API). ``apps.connections.open`` takes only the app-level token (``xapp-…``) and answers a
``ws://`` URL on this server; a connection gets Slack's ``hello``, then whatever the test sends
down the newest socket (``push_event``, ``socket_send``, ``socket_disconnect``,
``socket_drop``), and every envelope id the client acknowledges lands in ``socket_acks``.
"""

from __future__ import annotations

import asyncio
import hmac
import itertools
import json as jsonlib
from collections.abc import Mapping
from typing import Any

from aiohttp import WSMsgType, web

from bridge_core.testing import FakePlatform, RecordedRequest, Reply

__all__ = ["FakeSocketMode"]


class FakeSocketMode(FakePlatform):
    """Slack's Socket Mode, for one app-level token, served over local HTTP."""

    def __init__(self, *, app_token: str, host: str) -> None:
        super().__init__(host=host)
        self.app_token = app_token
        self.socket_acks: list[str] = []  # envelope ids the client acknowledged, in order
        self._sockets: list[tuple[asyncio.AbstractEventLoop, asyncio.Queue[tuple[str, Any]]]] = []
        self._envelopes = itertools.count(1)
        self._sockets_opened = 0
        self.add_route(
            "POST",
            "/api/apps.connections.open",
            self._apps_connections_open,
            name="apps.connections.open",
        )
        self.add_raw_route("GET", "/socket-mode", self._socket, name="socket")

    # ----------------------------------------------------------------- Slack's answers

    @staticmethod
    def error(code: str, *, status: int = 200) -> Reply:
        """A refusal as Slack sends it: ``{"ok": false, "error": code}``, HTTP 200 by default."""
        return Reply.json({"ok": False, "error": code}, status=status)

    @staticmethod
    def _ok(data: Mapping[str, Any]) -> Reply:
        return Reply.json({"ok": True, **data})

    # ----------------------------------------------------------------- Socket Mode

    def _apps_connections_open(self, request: RecordedRequest) -> Reply:
        header = request.header("Authorization") or ""
        scheme, _, token = header.partition(" ")
        if scheme != "Bearer" or not token:
            return self.error("not_authed")
        if token.startswith("xoxb-") or token.startswith("xoxp-"):
            return self.error("not_allowed_token_type")
        if not hmac.compare_digest(token, self.app_token):
            return self.error("invalid_auth")
        ticket = f"ticket-{next(self._envelopes)}"
        url = f"ws://{self.host}:{self.port}/socket-mode?ticket={ticket}"
        return self._ok({"url": url})

    @property
    def socket_connections(self) -> int:
        """Socket Mode connections open now."""
        with self.lock:
            return len(self._sockets)

    def wait_for_socket(self, count: int = 1, *, timeout: float = 5.0) -> None:
        """Block until ``count`` Socket Mode connections were opened in total (each ready to
        take ``push_event``)."""
        with self._arrived:
            if not self._arrived.wait_for(lambda: self._sockets_opened >= count, timeout):
                raise TimeoutError(
                    f"FakeSlack: {self._sockets_opened} of {count} Socket Mode connections "
                    f"opened within {timeout} s"
                )

    def push_event(self, payload: bytes | Mapping[str, Any], *, retry_attempt: int = 0) -> str:
        """Send an ``events_api`` envelope with this ``event_callback`` payload down the newest
        socket; returns its ``envelope_id`` (see ``socket_acks``)."""
        data = jsonlib.loads(payload) if isinstance(payload, bytes) else dict(payload)
        envelope_id = f"env-{next(self._envelopes)}"
        self._socket_put(
            "send",
            {
                "envelope_id": envelope_id,
                "type": "events_api",
                "accepts_response_payload": False,
                "retry_attempt": retry_attempt,
                "retry_reason": "timeout" if retry_attempt else "",
                "payload": data,
            },
        )
        return envelope_id

    def socket_send(self, message: Mapping[str, Any]) -> None:
        """Send any JSON message down the newest socket."""
        self._socket_put("send", dict(message))

    def socket_disconnect(self, reason: str = "refresh_requested") -> None:
        """Slack's planned goodbye: a ``disconnect`` message, then the socket closes."""
        self._socket_put("send", {"type": "disconnect", "reason": reason, "debug_info": {}})
        self._socket_put("close", None)

    def socket_drop(self) -> None:
        """Cut the newest socket without a closing handshake."""
        self._socket_put("drop", None)

    def socket_acked(self, envelope_id: str, *, timeout: float = 5.0) -> bool:
        """Wait until the client acknowledged ``envelope_id``; False after ``timeout``."""
        with self._arrived:
            return self._arrived.wait_for(lambda: envelope_id in self.socket_acks, timeout)

    def _socket_put(self, kind: str, message: Any) -> None:
        with self.lock:
            if not self._sockets:
                raise LookupError("FakeSlack has no open Socket Mode connection")
            loop, queue = self._sockets[-1]
        loop.call_soon_threadsafe(queue.put_nowait, (kind, message))

    async def _socket(self, request: web.Request) -> web.StreamResponse:
        socket = web.WebSocketResponse()
        await socket.prepare(request)
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        entry = (asyncio.get_running_loop(), queue)
        with self._arrived:
            self._sockets.append(entry)
            self._sockets_opened += 1
            self._arrived.notify_all()
        await socket.send_json(
            {"type": "hello", "num_connections": len(self._sockets), "debug_info": {}}
        )
        reader = asyncio.ensure_future(self._read_acks(socket))
        try:
            while not reader.done():
                getter = asyncio.ensure_future(queue.get())
                await asyncio.wait({getter, reader}, return_when=asyncio.FIRST_COMPLETED)
                if not getter.done():
                    getter.cancel()
                    break
                kind, message = getter.result()
                if kind == "send":
                    await socket.send_json(message)
                elif kind == "close":
                    await socket.close()
                    break
                else:
                    if request.transport is not None:
                        request.transport.abort()
                    break
        finally:
            reader.cancel()
            with self.lock:
                self._sockets.remove(entry)
        return socket

    async def _read_acks(self, socket: web.WebSocketResponse) -> None:
        async for message in socket:
            if message.type != WSMsgType.TEXT:
                continue
            try:
                data = jsonlib.loads(message.data)
            except ValueError:
                continue
            if isinstance(data, dict) and isinstance(data.get("envelope_id"), str):
                with self._arrived:
                    self.socket_acks.append(data["envelope_id"])
                    self._arrived.notify_all()
