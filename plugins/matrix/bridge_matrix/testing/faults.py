"""A loopback proxy in front of a real homeserver that can answer one request with a fault.

The conformance suite scripts "the next post fails with X" and then expects the next post to
work again. A real Synapse produces most of these faults itself (a kicked bot gets
``M_FORBIDDEN``, a tight ``rc_message`` gets ``M_LIMIT_EXCEEDED``), but not for exactly one
request; so ``FaultProxy`` forwards every request to the server untouched unless a fault is
scripted for it, and then answers with the body Synapse itself sends for that fault (or drops
the connection, or stalls). Requests are counted here, at the platform side.

``hold`` keeps one request in flight for as long as a test needs (before or after the server has
seen it), so a test can SIGKILL a client at a moment it knows a send is under way instead of
guessing one.

Exception hierarchy: none of its own.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

__all__ = ["FaultProxy", "ScriptedReply"]

_HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding"}
)


@dataclass(frozen=True, slots=True)
class ScriptedReply:
    """What the proxy answers instead of forwarding: a status and JSON body, a dropped
    connection (``drop``), or silence for ``stall`` seconds first."""

    status: int = 200
    body: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    drop: bool = False
    stall: float = 0.0

    @classmethod
    def error(cls, status: int, errcode: str, error: str, **extra: Any) -> ScriptedReply:
        return cls(status=status, body={"errcode": errcode, "error": error, **extra})

    @classmethod
    def rate_limited(cls, retry_after: float) -> ScriptedReply:
        """Synapse's own 429: ``retry_after_ms`` in the body and ``Retry-After`` rounded up."""
        return cls(
            status=429,
            body={
                "errcode": "M_LIMIT_EXCEEDED",
                "error": "Too Many Requests",
                "retry_after_ms": int(retry_after * 1000),
            },
            headers={"Retry-After": str(int(-(-retry_after // 1)))},
        )


Matcher = Callable[[str, str], bool]


@dataclass(eq=False)
class _Hold:
    method: str
    path_part: str
    skip: int
    forward: bool
    held: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)


class FaultProxy:
    """``with FaultProxy(upstream) as proxy``: ``proxy.url`` forwards to ``upstream``."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self._scripted: list[tuple[Matcher, ScriptedReply]] = []
        self._holds: list[_Hold] = []
        self._lock = threading.Lock()
        self.requests: list[tuple[str, str]] = []
        self._client = httpx.Client(timeout=120.0)
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def _handle(self) -> None:
                proxy._serve(self)

            do_GET = do_PUT = do_POST = do_DELETE = _handle

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        # A short poll interval: shutdown() waits up to one interval, once per test.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def script(self, method: str, path_part: str, reply: ScriptedReply) -> None:
        """Answer the next ``method`` request whose path contains ``path_part`` with ``reply``."""

        def matches(m: str, path: str) -> bool:
            return m == method and path_part in path

        with self._lock:
            self._scripted.append((matches, reply))

    def hold(self, method: str, path_part: str, *, skip: int, forward: bool) -> threading.Event:
        """Let ``skip`` matching requests through, then hold the next one open until
        ``release_holds``: forwarded first (the server has acted on it, the client has no answer)
        when ``forward``, else never forwarded. The returned event is set once it is held."""
        hold = _Hold(method, path_part, skip, forward)
        with self._lock:
            self._holds.append(hold)
        return hold.held

    def release_holds(self) -> None:
        """Let every held request end (its client, usually killed by now, gets no answer)."""
        with self._lock:
            holds, self._holds = self._holds, []
        for hold in holds:
            hold.release.set()

    def _take_hold(self, method: str, path: str) -> _Hold | None:
        with self._lock:
            for hold in self._holds:
                if hold.method == method and hold.path_part in path and not hold.held.is_set():
                    if hold.skip:
                        hold.skip -= 1
                        return None
                    hold.held.set()
                    return hold
        return None

    def count(self) -> int:
        with self._lock:
            return len(self.requests)

    def _take(self, method: str, path: str) -> ScriptedReply | None:
        with self._lock:
            self.requests.append((method, path))
            for index, (matches, reply) in enumerate(self._scripted):
                if matches(method, path):
                    del self._scripted[index]
                    return reply
        return None

    def _serve(self, handler: BaseHTTPRequestHandler) -> None:
        try:
            self._answer(handler)
        except OSError:
            # The client gave up first (a stalled reply past its deadline): nothing to answer.
            handler.close_connection = True

    def _answer(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        reply = self._take(handler.command, handler.path)
        hold = None if reply is not None else self._take_hold(handler.command, handler.path)
        if hold is not None:
            if hold.forward:
                self._forward(handler, body)
            hold.release.wait()
            handler.close_connection = True
            handler.connection.close()
            return
        if reply is not None:
            if reply.stall:
                time.sleep(reply.stall)
            if reply.drop:
                handler.close_connection = True
                handler.connection.close()
                return
            payload = json.dumps(reply.body).encode()
            handler.send_response(reply.status)
            for name, value in {"Content-Type": "application/json", **reply.headers}.items():
                handler.send_header(name, value)
            handler.send_header("Content-Length", str(len(payload)))
            handler.end_headers()
            handler.wfile.write(payload)
            return
        answer = self._forward(handler, body)
        if answer is None:
            handler.close_connection = True
            handler.connection.close()
            return
        handler.send_response(answer.status_code)
        for name, value in answer.headers.items():
            if name.lower() not in _HOP_BY_HOP:
                handler.send_header(name, value)
        handler.send_header("Content-Length", str(len(answer.content)))
        handler.end_headers()
        handler.wfile.write(answer.content)

    def _forward(self, handler: BaseHTTPRequestHandler, body: bytes) -> httpx.Response | None:
        headers = {k: v for k, v in handler.headers.items() if k.lower() not in _HOP_BY_HOP}
        headers.pop("Host", None)
        try:
            return self._client.request(
                handler.command, self.upstream + handler.path, content=body, headers=headers
            )
        except httpx.HTTPError:
            return None

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release_holds()
        self._server.shutdown()
        self._server.server_close()
        self._client.close()
