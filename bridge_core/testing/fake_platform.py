"""A scriptable fake chat platform served over real local HTTP, for testing provider plugins.

Provider tests drive the platform's real SDK client (slack-sdk and discord.py on aiohttp,
botbuilder on requests) against this server, so what is tested is what goes over the wire. The
server runs on ``127.0.0.1`` on a random port in a background thread with its own asyncio loop,
which serves async clients on any loop and blocking clients alike.

A platform fake (``FakeSlack``, a Discord or Teams fake) subclasses ``FakePlatform`` and adds
routes whose handlers validate what the real platform validates (path, auth header, required
parameters, encoding) and answer with the documented bodies. Tests then:

- read what was sent: ``fake.requests``, ``fake.requests_to("chat.postMessage")``, ``fake.last()``;
- script faults per route, consumed in order before the route's own handler runs:
  ``fake.script("chat.postMessage", Reply.json({...}, status=429, headers={...}))``,
  ``Reply.dropped()`` (the connection is closed with no response), ``Reply.slow(5.0)``;
- wait for requests made from another thread or loop: ``fake.wait_for(3)`` or
  ``await fake.wait_for_async(3)``.

Handlers run on the server's thread; a fake keeps its state under ``fake.lock``.

Exception hierarchy::

    FakePlatformError          the fake could not start, or was used before it started
"""

from __future__ import annotations

import asyncio
import json as jsonlib
import re
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Self
from urllib.parse import parse_qsl

import anyio.to_thread
from aiohttp import web

__all__ = [
    "UNMATCHED",
    "FakePlatform",
    "FakePlatformError",
    "RawHandler",
    "RecordedRequest",
    "Reply",
    "RouteHandler",
]

UNMATCHED = "<unmatched>"  # the route name recorded for requests no route matched


class FakePlatformError(RuntimeError):
    """The fake platform could not start, or was used before ``start()``."""


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One request as the fake platform received it."""

    route: str
    method: str
    path: str
    headers: Mapping[str, str]
    query: Mapping[str, str]
    body: bytes
    params: Mapping[str, str] = field(default_factory=dict)
    at: float = 0.0  # time.monotonic() when it arrived

    def header(self, name: str) -> str | None:
        lowered = name.lower()
        for key, value in self.headers.items():
            if key.lower() == lowered:
                return value
        return None

    @property
    def content_type(self) -> str:
        """The media type without parameters, lower-cased ("" when absent)."""
        raw = self.header("Content-Type") or ""
        return raw.split(";", 1)[0].strip().lower()

    @property
    def charset(self) -> str | None:
        raw = self.header("Content-Type") or ""
        for part in raw.split(";")[1:]:
            key, _, value = part.partition("=")
            if key.strip().lower() == "charset":
                return value.strip().strip('"').lower()
        return None

    @property
    def json(self) -> Any:
        """The body parsed as JSON; ``ValueError`` when it is not JSON."""
        return jsonlib.loads(self.body.decode("utf-8"))

    @property
    def form(self) -> dict[str, str]:
        """The body parsed as ``application/x-www-form-urlencoded``."""
        return dict(parse_qsl(self.body.decode("utf-8"), keep_blank_values=True))

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")


@dataclass(frozen=True, slots=True)
class Reply:
    """What the fake answers: a status, a body and headers, optionally late or not at all."""

    status: int = 200
    body: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)
    content_type: str = "application/json"
    delay: float = 0.0  # seconds to wait before answering
    drop: bool = False  # close the connection without answering

    @classmethod
    def json(
        cls, data: Any, *, status: int = 200, headers: Mapping[str, str] | None = None
    ) -> Reply:
        return cls(
            status=status,
            body=jsonlib.dumps(data).encode("utf-8"),
            headers=dict(headers or {}),
            content_type="application/json",
        )

    @classmethod
    def text(
        cls,
        text: str,
        *,
        status: int = 200,
        headers: Mapping[str, str] | None = None,
        content_type: str = "text/plain",
    ) -> Reply:
        return cls(
            status=status,
            body=text.encode("utf-8"),
            headers=dict(headers or {}),
            content_type=content_type,
        )

    @classmethod
    def empty(cls, status: int = 204) -> Reply:
        return cls(status=status, content_type="")

    @classmethod
    def dropped(cls) -> Reply:
        """Close the connection after reading the request, with no response at all."""
        return cls(drop=True)

    @classmethod
    def slow(cls, seconds: float, then: Reply | None = None) -> Reply:
        """Answer ``then`` (a bare 200 by default) only after ``seconds``."""
        return replace(then if then is not None else cls(), delay=seconds)


RouteHandler = Callable[[RecordedRequest], "Reply | Awaitable[Reply]"]
"""A route's own behaviour: validate the request, update the fake's state, answer."""

RawHandler = Callable[[web.Request], Awaitable[web.StreamResponse]]
"""An aiohttp handler for what ``Reply`` cannot express, such as a websocket gateway."""


@dataclass(slots=True)
class _Route:
    name: str
    method: str
    pattern: re.Pattern[str]
    handler: RouteHandler | None = None
    raw: RawHandler | None = None


@dataclass(slots=True)
class _Script:
    reply: Reply
    remaining: int | None  # None: every request until cleared


_PARAM = re.compile(r"\{(\w+)\}")


def _compile(path: str) -> re.Pattern[str]:
    pieces: list[str] = []
    last = 0
    for match in _PARAM.finditer(path):
        pieces.append(re.escape(path[last : match.start()]))
        pieces.append(f"(?P<{match.group(1)}>[^/]+)")
        last = match.end()
    pieces.append(re.escape(path[last:]))
    return re.compile("^" + "".join(pieces) + "$")


class FakePlatform:
    """A local HTTP server with named routes, a request record and scripted faults.

    Use it as a context manager (``with FakeSlack() as fake:``) or ``start()``/``stop()``.
    Routes may be added before or after starting.
    """

    name: str = "fake"

    def __init__(self, *, host: str = "127.0.0.1") -> None:
        self.host = host
        self.lock = threading.RLock()
        self._routes: list[_Route] = []
        self._scripts: dict[str, deque[_Script]] = {}
        self._requests: list[RecordedRequest] = []
        self._arrived = threading.Condition(self.lock)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._port: int | None = None
        self._startup_error: BaseException | None = None
        self._every: tuple[int, Callable[[], Reply], frozenset[str]] | None = None
        self._every_seen = 0

    def __repr__(self) -> str:
        where = self.base_url if self._port is not None else "not started"
        return f"<{type(self).__name__} {where}>"

    # ----------------------------------------------------------------- routes and scripts

    def add_route(
        self, method: str, path: str, handler: RouteHandler, *, name: str | None = None
    ) -> None:
        """Serve ``method path`` (``{param}`` segments allowed) with ``handler``.

        ``name`` (default ``path``) is how tests refer to the route in ``script`` and
        ``requests_to``. ``method`` ``"*"`` matches any method.
        """
        with self.lock:
            self._routes.append(
                _Route(name or path, method.upper(), _compile(path), handler=handler)
            )

    def add_raw_route(self, method: str, path: str, handler: RawHandler, *, name: str) -> None:
        """Serve a route with a plain aiohttp handler (websockets, streaming). Recorded, and
        scripted replies still apply before it runs."""
        with self.lock:
            self._routes.append(_Route(name, method.upper(), _compile(path), raw=handler))

    def script(self, route: str, *replies: Reply, times: int | None = 1) -> None:
        """Answer the next requests to ``route`` with ``replies`` in order, each ``times`` times
        (``None``: for every request until ``clear_scripts``), before the route's handler."""
        with self.lock:
            if not any(r.name == route for r in self._routes):
                known = ", ".join(sorted({r.name for r in self._routes})) or "none"
                raise KeyError(f"{type(self).__name__} has no route {route!r} (routes: {known})")
            queue = self._scripts.setdefault(route, deque())
            for reply in replies:
                queue.append(_Script(reply, times))

    def fail_every(self, n: int, reply: Callable[[], Reply], *, routes: Iterable[str]) -> None:
        """Answer every ``n``-th request to any of ``routes`` (counted together, from now) with
        ``reply()``, before scripts and handlers: "a 429 every 7th write". ``n=0`` stops it."""
        with self.lock:
            self._every = (n, reply, frozenset(routes)) if n > 0 else None
            self._every_seen = 0

    def _every_nth(self, route: str) -> Reply | None:
        with self.lock:
            if self._every is None or route not in self._every[2]:
                return None
            self._every_seen += 1
            n, reply, _ = self._every
            return reply() if self._every_seen % n == 0 else None

    def clear_scripts(self, route: str | None = None) -> None:
        with self.lock:
            if route is None:
                self._scripts.clear()
            else:
                self._scripts.pop(route, None)

    def reset(self) -> None:
        """Forget recorded requests and scripted replies (routes and fake state stay)."""
        with self.lock:
            self._requests.clear()
            self._scripts.clear()

    def unmatched(self, request: RecordedRequest) -> Reply:
        """The answer to a request no route matched; platform fakes override it."""
        return Reply.json({"error": f"no such route: {request.method} {request.path}"}, status=404)

    # ----------------------------------------------------------------- the record

    @property
    def requests(self) -> list[RecordedRequest]:
        with self.lock:
            return list(self._requests)

    def requests_to(self, route: str) -> list[RecordedRequest]:
        with self.lock:
            return [r for r in self._requests if r.route == route]

    def count(self, route: str | None = None) -> int:
        with self.lock:
            if route is None:
                return len(self._requests)
            return sum(1 for r in self._requests if r.route == route)

    def last(self, route: str | None = None) -> RecordedRequest:
        with self.lock:
            for request in reversed(self._requests):
                if route is None or request.route == route:
                    return request
        raise LookupError(f"{type(self).__name__} received no request to {route or 'any route'}")

    def wait_for(
        self, count: int, route: str | None = None, *, timeout: float = 5.0
    ) -> list[RecordedRequest]:
        """Block until ``count`` requests (to ``route``) arrived; ``TimeoutError`` otherwise."""
        with self._arrived:
            if not self._arrived.wait_for(lambda: self.count(route) >= count, timeout=timeout):
                raise TimeoutError(
                    f"{type(self).__name__}: {self.count(route)} of {count} requests to "
                    f"{route or 'any route'} arrived within {timeout} s"
                )
            return self.requests if route is None else self.requests_to(route)

    async def wait_for_async(
        self, count: int, route: str | None = None, *, within: float = 5.0
    ) -> list[RecordedRequest]:
        """``wait_for`` (with ``within`` seconds) without blocking the caller's event loop."""
        return await anyio.to_thread.run_sync(
            lambda: self.wait_for(count, route, timeout=within), abandon_on_cancel=True
        )

    # ----------------------------------------------------------------- lifecycle

    @property
    def port(self) -> int:
        if self._port is None:
            raise FakePlatformError(f"{type(self).__name__} is not running: call start() first")
        return self._port

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>``, without a trailing slash."""
        return f"http://{self.host}:{self.port}"

    def url(self, path: str) -> str:
        return self.base_url + (path if path.startswith("/") else "/" + path)

    def start(self) -> Self:
        if self._thread is not None:
            raise FakePlatformError(f"{type(self).__name__} is already running")
        ready = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(ready,), name=f"{type(self).__name__}-server", daemon=True
        )
        self._thread.start()
        if not ready.wait(timeout=10.0):
            raise FakePlatformError(f"{type(self).__name__} did not start within 10 s")
        if self._startup_error is not None:
            self._thread.join(timeout=5.0)
            self._thread = None
            raise FakePlatformError(
                f"{type(self).__name__} failed to start: {self._startup_error!r}"
            ) from self._startup_error
        return self

    def stop(self) -> None:
        thread, loop, stopping = self._thread, self._loop, self._stopping
        if thread is None:
            return
        if loop is not None and stopping is not None and not loop.is_closed():
            loop.call_soon_threadsafe(stopping.set)
        thread.join(timeout=10.0)
        self._thread = None
        self._loop = None
        self._port = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @contextmanager
    def running(self) -> Iterator[Self]:
        self.start()
        try:
            yield self
        finally:
            self.stop()

    def _run(self, ready: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve(ready))
        except BaseException as exc:  # reported to start(); the thread must not die silently
            self._startup_error = exc
            ready.set()
        finally:
            loop.close()

    async def _serve(self, ready: threading.Event) -> None:
        self._stopping = asyncio.Event()
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.5)
        await runner.setup()
        try:
            site = web.TCPSite(runner, self.host, 0)
            await site.start()
            self._port = int(runner.addresses[0][1])
            ready.set()
            await self._stopping.wait()
        finally:
            await runner.cleanup()

    # ----------------------------------------------------------------- serving

    def _match(self, method: str, path: str) -> tuple[_Route | None, dict[str, str]]:
        with self.lock:
            for route in self._routes:
                if route.method not in ("*", method):
                    continue
                found = route.pattern.match(path)
                if found:
                    return route, found.groupdict()
        return None, {}

    def _next_script(self, route: str) -> Reply | None:
        with self.lock:
            queue = self._scripts.get(route)
            if not queue:
                return None
            head = queue[0]
            if head.remaining is not None:
                head.remaining -= 1
                if head.remaining <= 0:
                    queue.popleft()
            return head.reply

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        route, params = self._match(request.method, request.path)
        recorded = RecordedRequest(
            route=route.name if route else UNMATCHED,
            method=request.method,
            path=request.path,
            headers=dict(request.headers),
            query=dict(request.query),
            body=body,
            params=params,
            at=time.monotonic(),
        )
        with self._arrived:
            self._requests.append(recorded)
            self._arrived.notify_all()
        reply: Reply | None = None
        if route is not None:
            reply = self._every_nth(route.name) or self._next_script(route.name)
        if reply is None:
            if route is None:
                reply = self.unmatched(recorded)
            elif route.raw is not None:
                return await route.raw(request)
            else:
                assert route.handler is not None
                outcome = route.handler(recorded)
                reply = await outcome if isinstance(outcome, Awaitable) else outcome
        return await self._answer(request, reply)

    async def _answer(self, request: web.Request, reply: Reply) -> web.StreamResponse:
        if reply.delay > 0:
            assert self._stopping is not None
            try:
                await asyncio.wait_for(self._stopping.wait(), timeout=reply.delay)
                reply = Reply.dropped()  # shutting down: never answer a slow request late
            except TimeoutError:
                pass
        if reply.drop:
            transport = request.transport
            if transport is not None:
                transport.abort()
            # aiohttp needs a response object; it is never written to the aborted transport.
            raise asyncio.CancelledError
        response = web.Response(status=reply.status, body=reply.body, headers=dict(reply.headers))
        if reply.content_type:
            response.content_type = reply.content_type
        return response
