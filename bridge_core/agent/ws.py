"""A small WebSocket client on anyio streams and wsproto (sans-I/O), so it runs on asyncio and trio.

Only what the agent SDK needs: connect with headers (``ws://`` or ``wss://``), send and receive
text messages, answer pings, close with a code. ``ConnectionClosed`` carries the close code
(1006 when the connection went without a close frame) and the reason.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit

import anyio
from anyio.abc import ByteStream
from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Ping,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)

__all__ = ["ConnectionClosed", "HandshakeRefused", "WebSocket", "connect_websocket"]

ABNORMAL = 1006


class ConnectionClosed(Exception):
    """The socket is closed: ``code`` from the close frame, or 1006 without one."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(f"connection closed ({code}{': ' + reason if reason else ''})")
        self.code = code
        self.reason = reason


class HandshakeRefused(Exception):
    """The server answered the upgrade with an HTTP status instead of a WebSocket."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"the gateway refused the WebSocket upgrade: HTTP {status} {body}".strip())
        self.status = status
        self.body = body


@dataclass(frozen=True, slots=True)
class _Target:
    host: str
    port: int
    path: str
    tls: bool


def _target(url: str) -> _Target:
    parts = urlsplit(url)
    if parts.scheme not in ("ws", "wss") or not parts.hostname:
        raise ValueError(f"expected a ws:// or wss:// URL, got {url!r}")
    tls = parts.scheme == "wss"
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return _Target(parts.hostname, parts.port or (443 if tls else 80), path, tls)


class WebSocket:
    """An open client WebSocket; use ``connect_websocket``."""

    def __init__(self, stream: ByteStream, protocol: WSConnection) -> None:
        self._stream = stream
        self._ws = protocol
        self._send_lock = anyio.Lock()
        self._parts: list[str] = []
        self._pending: list[str] = []
        self.closed: ConnectionClosed | None = None
        self._reading = False
        self._ended = anyio.Event()

    async def _write(self, data: bytes) -> None:
        if not data:
            return
        async with self._send_lock:
            try:
                await self._stream.send(data)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as error:
                self.closed = self.closed or ConnectionClosed(ABNORMAL, str(error))
                raise self.closed from error

    async def send_text(self, text: str) -> None:
        if self.closed is not None:
            raise self.closed
        await self._write(self._ws.send(TextMessage(data=text)))

    async def receive(self) -> str:
        """The next text message; ``ConnectionClosed`` once the socket is closed."""
        self._reading = True
        try:
            return await self._receive()
        except ConnectionClosed:
            self._ended.set()
            raise
        finally:
            self._reading = False

    async def _receive(self) -> str:
        while not self._pending:
            if self.closed is not None:
                raise self.closed
            try:
                data = await self._stream.receive()
            except (
                anyio.EndOfStream,
                anyio.BrokenResourceError,
                anyio.ClosedResourceError,
                OSError,
            ):
                data = b""
            if not data:
                self.closed = self.closed or ConnectionClosed(ABNORMAL, "the connection was lost")
                await self._stream.aclose()
                raise self.closed
            self._ws.receive_data(data)
            for event in self._ws.events():
                if isinstance(event, TextMessage):
                    self._parts.append(event.data)
                    if event.message_finished:
                        self._pending.append("".join(self._parts))
                        self._parts.clear()
                elif isinstance(event, Ping):
                    await self._write(self._ws.send(event.response()))
                elif isinstance(event, CloseConnection):
                    self.closed = ConnectionClosed(event.code, event.reason or "")
                    if self._ws.state is ConnectionState.REMOTE_CLOSING:  # answer its close
                        try:
                            await self._write(self._ws.send(event.response()))
                        except ConnectionClosed:
                            pass
                    await self._stream.aclose()
                elif isinstance(event, BytesMessage):
                    continue  # the protocol sends none
        return self._pending.pop(0)

    async def close(self, code: int = 1000, reason: str = "") -> None:
        """Send a close frame, wait briefly for the server's, and close the stream."""
        if self.closed is None:
            try:
                await self._write(self._ws.send(CloseConnection(code=code, reason=reason)))
                with anyio.move_on_after(2.0):
                    if self._reading:  # another task reads: it sees the server's close frame
                        await self._ended.wait()
                    else:
                        while True:
                            await self.receive()
            except ConnectionClosed:
                pass
            self.closed = self.closed or ConnectionClosed(code, reason)
        await self._stream.aclose()

    async def abort(self) -> None:
        """Close the stream without a close frame (what a killed process does)."""
        self.closed = self.closed or ConnectionClosed(ABNORMAL, "aborted")
        await self._stream.aclose()


async def connect_websocket(
    url: str,
    *,
    headers: dict[str, str] | None = None,
    ssl_context: ssl.SSLContext | None = None,
    handshake_timeout: float = 10.0,
) -> WebSocket:
    """Open a WebSocket to ``url``; ``HandshakeRefused`` when the server answers with a status."""
    target = _target(url)
    with anyio.fail_after(handshake_timeout):
        stream: ByteStream
        if target.tls:
            stream = await anyio.connect_tcp(
                target.host,
                target.port,
                tls=True,
                ssl_context=ssl_context,
                tls_standard_compatible=False,
            )
        else:
            stream = await anyio.connect_tcp(target.host, target.port)
        protocol = WSConnection(ConnectionType.CLIENT)
        host = target.host if target.port in (80, 443) else f"{target.host}:{target.port}"
        extra = [(name.encode(), value.encode()) for name, value in (headers or {}).items()]
        try:
            await stream.send(
                protocol.send(Request(host=host, target=target.path, extra_headers=extra))
            )
            status: int | None = None
            body = b""
            while True:
                data = await stream.receive()
                protocol.receive_data(data)
                for event in protocol.events():
                    if isinstance(event, AcceptConnection):
                        return WebSocket(stream, protocol)
                    if isinstance(event, RejectConnection):
                        status = event.status_code
                        if not event.has_body:
                            raise HandshakeRefused(status, "")
                    elif isinstance(event, RejectData):
                        body += event.data
                        if event.body_finished:
                            raise HandshakeRefused(status or 0, body.decode("utf-8", "replace"))
        except BaseException:
            await stream.aclose()
            raise
