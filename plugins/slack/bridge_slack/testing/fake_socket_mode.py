"""The Socket Mode half of the fake Slack: ``apps.connections.open`` and its websockets.

``FakeSocketMode`` is ``FakeSlack``'s base class (use ``FakeSlack``; this half alone serves no
Web API). ``apps.connections.open`` takes only the app-level token (``xapp-…``) and answers a
``ws://`` URL on this server. A connection gets Slack's ``hello``, then whatever the test sends
down it (``push_event``, ``socket_send``, ``socket_disconnect``, ``socket_close``,
``socket_drop``; the newest open socket unless ``socket=`` names one by its number, 1 for the
first opened), and every envelope id the client acknowledges lands in ``socket_acks``.

What Slack documents, the fake does: an app holds at most ``socket_limit`` connections (10);
``disconnect`` warns of a close that comes later (``socket_disconnect(close=False)`` keeps the
socket open and delivering until ``socket_close``), and Slack sends nothing on a connection
before its ``hello`` (``hold_hello`` keeps new connections waiting for ``socket_hello``). How
Slack turns away a connection over the limit is not documented: the fake sends ``hello``, then
a ``disconnect`` with reason ``too_many_websockets`` (the message python-slack-sdk's mock server
uses), then closes that socket. ``socket_log`` records each socket's life (``"open 2"``,
``"hello 2"``, ``"closed 1 by client"``, ``"closed 1 by slack"``, ``"dropped 1"``, and
``"lost 1"`` when the client cut it without a closing handshake) and ``socket_peak`` the most
open at once.
"""

from __future__ import annotations

import asyncio
import hmac
import itertools
import json as jsonlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aiohttp import WSCloseCode, WSMsgType, web

from bridge_core.testing import FakePlatform, RecordedRequest, Reply

__all__ = ["SLACK_SOCKET_LIMIT", "FakeSocketMode"]

SLACK_SOCKET_LIMIT = 10  # Socket Mode connections an app may hold at once

T = TypeVar("T")


@dataclass(eq=False)
class _Socket:
    """One open websocket, as the fake's thread sees it."""

    number: int
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue[tuple[str, Any]] = field(default_factory=asyncio.Queue)
    hello: asyncio.Event = field(default_factory=asyncio.Event)


class FakeSocketMode(FakePlatform):
    """Slack's Socket Mode, for one app-level token, served over local HTTP."""

    def __init__(self, *, app_token: str, host: str) -> None:
        super().__init__(host=host)
        self.app_token = app_token
        self.socket_acks: list[str] = []  # envelope ids the client acknowledged, in order
        self.socket_log: list[str] = []  # "open 1", "hello 1", "closed 1 by client", ...
        self.socket_peak = 0  # the most Socket Mode connections open at once
        self.socket_limit = SLACK_SOCKET_LIMIT  # lower it to stand for connections held elsewhere
        self.hold_hello = False  # new connections wait for socket_hello(number)
        self._sockets: list[_Socket] = []  # open now, oldest first
        self._envelopes = itertools.count(1)
        self._socket_numbers = itertools.count(1)
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
        self._wait(
            lambda: self._sockets_opened >= count,
            timeout,
            lambda: f"{self._sockets_opened} of {count} Socket Mode connections opened",
        )

    def wait_for_open_sockets(self, count: int, *, timeout: float = 5.0) -> None:
        """Block until exactly ``count`` Socket Mode connections are open."""
        self._wait(
            lambda: len(self._sockets) == count,
            timeout,
            lambda: f"{len(self._sockets)} Socket Mode connections open, not {count}",
        )

    def wait_for_log(self, entry: str, *, timeout: float = 5.0) -> None:
        """Block until ``entry`` (``"closed 1 by client"``) is in ``socket_log``."""
        self._wait(lambda: entry in self.socket_log, timeout, lambda: f"no {entry!r} in log")

    def _wait(self, done: Callable[[], bool], timeout: float, why: Callable[[], str]) -> None:
        with self._arrived:
            if not self._arrived.wait_for(done, timeout):
                raise TimeoutError(f"FakeSlack: {why()} within {timeout} s")

    def push_event(
        self,
        payload: bytes | Mapping[str, Any],
        *,
        retry_attempt: int = 0,
        socket: int | None = None,
    ) -> str:
        """Send an ``events_api`` envelope with this ``event_callback`` payload down a socket
        (the newest open one by default); returns its ``envelope_id`` (see ``socket_acks``)."""
        data = jsonlib.loads(payload) if isinstance(payload, bytes) else dict(payload)
        envelope_id = f"env-{next(self._envelopes)}"
        envelope = {
            "envelope_id": envelope_id,
            "type": "events_api",
            "accepts_response_payload": False,
            "retry_attempt": retry_attempt,
            "retry_reason": "timeout" if retry_attempt else "",
            "payload": data,
        }
        self._socket_put("send", envelope, socket)
        return envelope_id

    def socket_send(self, message: Mapping[str, Any], *, socket: int | None = None) -> None:
        """Send any JSON message down a socket (the newest open one by default)."""
        self._socket_put("send", dict(message), socket)

    def socket_disconnect(
        self, reason: str = "refresh_requested", *, close: bool = True, socket: int | None = None
    ) -> None:
        """Slack's planned goodbye: a ``disconnect`` message, then (``close``) the socket closes.
        With ``close=False`` the socket stays open and delivering until ``socket_close``, as it
        does for the seconds between Slack's ``warning`` and the close."""
        self._socket_put("send", {"type": "disconnect", "reason": reason, "debug_info": {}}, socket)
        if close:
            self._socket_put("close", None, socket)

    def socket_close(self, *, socket: int | None = None) -> None:
        """Close a socket from Slack's side with a closing handshake."""
        self._socket_put("close", None, socket)

    def socket_drop(self, *, socket: int | None = None) -> None:
        """Cut a socket without a closing handshake."""
        self._socket_put("drop", None, socket)

    def socket_hello(self, socket: int) -> None:
        """Send the ``hello`` a connection opened under ``hold_hello`` is waiting for."""
        entry = self._find(socket)
        entry.loop.call_soon_threadsafe(entry.hello.set)

    def socket_acked(self, envelope_id: str, *, timeout: float = 5.0) -> bool:
        """Wait until the client acknowledged ``envelope_id``; False after ``timeout``."""
        with self._arrived:
            return self._arrived.wait_for(lambda: envelope_id in self.socket_acks, timeout)

    def _find(self, number: int | None) -> _Socket:
        with self.lock:
            found = [s for s in self._sockets if number is None or s.number == number]
            if not found:
                which = "open" if number is None else f"open numbered {number}"
                raise LookupError(f"FakeSlack has no {which} Socket Mode connection")
            return found[-1]

    def _socket_put(self, kind: str, message: Any, number: int | None) -> None:
        entry = self._find(number)
        entry.loop.call_soon_threadsafe(entry.queue.put_nowait, (kind, message))

    def _note(self, line: str) -> None:
        with self._arrived:
            self.socket_log.append(line)
            self._arrived.notify_all()

    async def _socket(self, request: web.Request) -> web.StreamResponse:
        socket = web.WebSocketResponse()
        await socket.prepare(request)
        with self._arrived:
            entry = _Socket(next(self._socket_numbers), asyncio.get_running_loop())
            over_limit = len(self._sockets) >= self.socket_limit
            self._sockets.append(entry)
            self._sockets_opened += 1
            self.socket_peak = max(self.socket_peak, len(self._sockets))
            self.socket_log.append(f"open {entry.number}")
            if not self.hold_hello:
                entry.hello.set()
            self._arrived.notify_all()
        if over_limit:  # what python-slack-sdk's mock server sends (the refusal is undocumented)
            for kind, message in (
                ("send", {"type": "disconnect", "reason": "too_many_websockets"}),
                ("close", None),
            ):
                entry.queue.put_nowait((kind, message))
        reader = asyncio.ensure_future(self._read_acks(socket))
        ended = f"closed {entry.number} by client"
        try:
            if await self._first(entry.hello.wait(), reader):
                await socket.send_json(
                    {"type": "hello", "num_connections": len(self._sockets), "debug_info": {}}
                )
                self._note(f"hello {entry.number}")
                while (item := await self._first(entry.queue.get(), reader)) is not None:
                    kind, message = item
                    if kind == "send":
                        await socket.send_json(message)
                    elif kind == "close":
                        ended = f"closed {entry.number} by slack"
                        await socket.close()
                        break
                    else:
                        ended = f"dropped {entry.number}"
                        if request.transport is not None:
                            request.transport.abort()
                        break
            if ended.endswith("by client") and socket.close_code != WSCloseCode.OK:
                ended = f"lost {entry.number}"  # cut without a closing handshake
        finally:
            reader.cancel()
            with self._arrived:
                self._sockets.remove(entry)
                self.socket_log.append(ended)
                self._arrived.notify_all()
        return socket

    @staticmethod
    async def _first(waiting: Awaitable[T], reader: asyncio.Future[None]) -> T | None:
        """What ``waiting`` gives, or None when the client's side ended first."""
        getter = asyncio.ensure_future(waiting)
        pending: set[asyncio.Future[Any]] = {getter, reader}
        await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        if not getter.done():
            getter.cancel()
            return None
        return getter.result()

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
