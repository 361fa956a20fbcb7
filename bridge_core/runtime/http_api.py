"""The gateway's HTTP API on aiohttp.web.

Routes::

    POST /v1/events     one fleet event or an array of them -> 202 {"accepted", "ignored"}
    POST /v1/messages   {"channel", "text", "thread"?, "idempotency_key"?} -> 202 once the reply
                        is durably recorded in the ledger {"obligation", "duplicate"}
    GET  /healthz       per channel and provider; 503 naming the unhealthy ones
    GET  /metrics       Prometheus text
    GET  /v1/status     channels (health, budget use, live messages, members) and the ledger
                        by state, for `chatbridge top` (runtime.status)
    GET  /v1/agents     the agent socket (WebSocket; ``runtime.agent_socket``), when served
    <provider routes>   each provider's ``http_routes(sink)`` (Slack Events, Teams), unauthenticated
                        here because the platforms sign their own requests

Every client error is a 4xx with a JSON body ``{"error": ..., "field"?: ..., "index"?: ...}``
naming what was wrong; a batch is validated whole before any of it is accepted, so a 4xx means
nothing was accepted. With a bearer token configured, ``/v1/*`` and ``/metrics`` require
``Authorization: Bearer <token>`` (401 when missing, 403 when wrong); ``/healthz`` stays open for
load balancers.

Exception hierarchy::

    ApiError               a request the backend refuses, rendered as its status and message
    └── ShuttingDown       the gateway stopped taking new work (503)
"""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import Any, Protocol

from aiohttp import web
from aiohttp.typedefs import Middleware
from aiohttp.web_protocol import RequestPayloadError

from bridge_core.event_batches import status_batch
from bridge_core.events import (
    EventError,
    FleetEvent,
    UnknownEvent,
    parse_checked_events,
    parse_event,
)
from bridge_core.provider import HttpRequest, HttpRoute
from bridge_core.text import find_invalid_text, json_may_hold_invalid_text, text_problem

__all__ = [
    "AGENT_SOCKET_PATH",
    "DEFAULT_MAX_BODY",
    "ApiBackend",
    "ApiError",
    "Handler",
    "Health",
    "MessageReceipt",
    "MessageRequest",
    "ShuttingDown",
    "build_app",
    "parse_message_request",
]

log = logging.getLogger("bridge_core.runtime.http")

DEFAULT_MAX_BODY = 1024 * 1024
AGENT_SOCKET_PATH = "/v1/agents"
MAX_IDEMPOTENCY_KEY = 200


class ApiError(Exception):
    """A request the gateway refuses; ``status`` is the HTTP status to answer with."""

    def __init__(
        self, status: int, message: str, *, field: str | None = None, index: int | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.field = field
        self.index = index

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {"error": self.message}
        if self.field is not None:
            out["field"] = self.field
        if self.index is not None:
            out["index"] = self.index
        return out


class ShuttingDown(ApiError):
    def __init__(self) -> None:
        super().__init__(503, "the gateway is shutting down and takes no new work; retry elsewhere")


@dataclass(frozen=True, slots=True)
class MessageRequest:
    channel: str
    text: str
    thread: str | None = None
    idempotency_key: str | None = None


@dataclass(frozen=True, slots=True)
class MessageReceipt:
    obligation: str
    duplicate: bool  # the idempotency key was recorded before: nothing new was recorded


@dataclass(frozen=True, slots=True)
class Health:
    """``channels`` and ``providers`` map names to ``{"healthy": bool, ...details}``."""

    channels: dict[str, dict[str, Any]] = field(default_factory=dict)
    providers: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def unhealthy(self) -> list[str]:
        bad = [f"channel {n}" for n, d in self.channels.items() if not d.get("healthy", False)]
        bad += [f"provider {n}" for n, d in self.providers.items() if not d.get("healthy", False)]
        return bad


class ApiBackend(Protocol):
    """What the HTTP API needs from the gateway."""

    def channel_names(self) -> Sequence[str]: ...

    async def accept_events(self, events: Sequence[FleetEvent]) -> None:
        """Accept every event or none (raise ``ApiError``)."""

    async def accept_message(self, request: MessageRequest) -> MessageReceipt: ...

    async def health(self) -> Health: ...

    async def metrics_text(self) -> bytes: ...

    async def status(self) -> dict[str, Any]:
        """``GET /v1/status`` (bridge_core.runtime.status)."""


def _error(exc: ApiError) -> web.Response:
    response = web.json_response(exc.body(), status=exc.status)
    if isinstance(exc, _UnreadableBody):
        response.force_close()  # aiohttp cannot read past it to the next request
    return response


class _UnreadableBody(ApiError):
    """A body aiohttp could not decode (bad gzip): the connection cannot carry another request."""


async def _read_json(request: web.Request, max_body: int) -> Any:
    return _json_of(await _read_body(request, max_body))


async def _read_body(request: web.Request, max_body: int) -> bytes:
    if request.content_length is not None and request.content_length > max_body:
        raise _too_large(max_body)
    try:
        raw = await _body_of(request)
    except web.HTTPRequestEntityTooLarge:
        raise _too_large(max_body) from None
    if len(raw) > max_body:
        raise _too_large(max_body)
    return raw


async def _body_of(request: web.Request) -> bytes:
    """The request's body, decompressed; one that cannot be (bad gzip) is the client's error."""
    try:
        return await request.read()
    except RequestPayloadError as error:
        raise _UnreadableBody(
            400, f"request body could not be read: {error}", field="body"
        ) from None


def _json_of(raw: bytes) -> Any:
    if not raw or raw.isspace():
        raise ApiError(400, "request body is empty; send JSON", field="body")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ApiError(400, "request body is not UTF-8", field="body") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ApiError(
            400, f"malformed JSON: {exc.msg} at line {exc.lineno} column {exc.colno}", field="body"
        ) from None
    except (ValueError, RecursionError) as exc:  # a 5,000-digit number, nesting 10,000 deep
        raise ApiError(400, f"JSON the gateway will not read: {exc}", field="body") from None
    if json_may_hold_invalid_text(raw):  # most bodies hold no \u escape: no walk is needed
        _refuse_invalid_text(data)
    return data


def _too_large(max_body: int) -> ApiError:
    return ApiError(413, f"request body is larger than the limit of {max_body} bytes")


def _refuse_invalid_text(data: Any) -> None:
    """A 400 naming the first string of a body that is not valid Unicode text or holds a NUL
    (ADR 0070): refused here, whatever the route, before any of it is parsed or stored."""
    invalid = find_invalid_text(data)
    if invalid is None:
        return
    path, index = invalid.path, None
    if isinstance(data, list) and path:  # a batch: the event's index, then its field
        index, path = int(path[0]), path[1:]
    field = ".".join(str(part) for part in path) or "body"
    where = "" if index is None else f"event {index}: "
    raise ApiError(400, f"{where}{field}: {invalid.reason}", field=field, index=index)


def _header_problem(request: web.Request) -> ApiError | None:
    """A 400 for a header that is not UTF-8: aiohttp keeps such bytes as lone surrogates, which
    nothing after this point (the token check, a platform's signature check) can encode."""
    headers = request.headers
    # Every name and value checked at once (a lone surrogate or a NUL in any of them is in the
    # joined text); only a request that fails it is walked header by header, to name the one.
    if text_problem("\n".join(chain.from_iterable(headers.items()))) is None:
        return None
    for name, value in headers.items():
        problem = text_problem(name) or text_problem(value)
        if problem is not None:
            shown = name.encode("utf-8", "replace").decode("utf-8")
            return ApiError(
                400, f"header {shown} holds bytes that are not UTF-8 text, or NUL", field=shown
            )
    return None


def parse_events_body(data: Any, *, text_checked: bool = False) -> list[FleetEvent]:
    """Every event of a body (one object or an array), or ``ApiError`` naming the first bad one.

    ``text_checked``: the body's strings were already checked as a whole (``_read_json``), so
    each event is not walked again.
    """
    if isinstance(data, dict):
        items: list[Any] = [data]
        single = True
    elif isinstance(data, list):
        items = data
        single = False
    else:
        raise ApiError(
            400, f"body must be an event object or an array of them, got {type(data).__name__}"
        )
    if text_checked:
        try:
            return parse_checked_events(items)  # a whole batch in one loop
        except EventError as exc:
            raise _event_refused(exc, None if single else exc.index) from None
    events: list[FleetEvent] = []
    for index, item in enumerate(items):
        try:
            events.append(parse_event(item))
        except EventError as exc:
            raise _event_refused(exc, None if single else index) from None
    return events


def _event_refused(exc: EventError, index: int | None) -> ApiError:
    where = "" if index is None else f"event {index}: "
    return ApiError(400, f"{where}{exc}", field=exc.field, index=index)


_MESSAGE_FIELDS = ("channel", "text", "thread", "idempotency_key")


def parse_message_request(
    data: Any, *, channels: Sequence[str], header_key: str | None
) -> MessageRequest:
    if not isinstance(data, dict):
        raise ApiError(400, f"body must be a JSON object, got {type(data).__name__}")
    for key in data:
        if key not in _MESSAGE_FIELDS:
            raise ApiError(
                400, f"unknown field {key!r}; expected {', '.join(_MESSAGE_FIELDS)}", field=key
            )

    def text_field(name: str, *, required: bool) -> str | None:
        value = data.get(name)
        if value is None:
            if required:
                raise ApiError(400, f"{name}: is required (a non-empty string)", field=name)
            return None
        if not isinstance(value, str):
            raise ApiError(400, f"{name}: must be a string, got {type(value).__name__}", field=name)
        if not value.strip():
            raise ApiError(400, f"{name}: must not be empty", field=name)
        return value

    channel = text_field("channel", required=True)
    assert channel is not None
    if channel not in channels:
        known = ", ".join(sorted(channels)) or "none"
        raise ApiError(
            404, f"channel: {channel!r} is not configured (configured: {known})", field="channel"
        )
    text = text_field("text", required=True)
    assert text is not None
    key = text_field("idempotency_key", required=False)
    if header_key is not None:
        if not header_key.strip():
            raise ApiError(400, "Idempotency-Key header must not be empty", field="idempotency_key")
        if key is not None and key != header_key:
            raise ApiError(
                400,
                "idempotency_key in the body differs from the Idempotency-Key header",
                field="idempotency_key",
            )
        key = header_key
    if key is not None and len(key) > MAX_IDEMPOTENCY_KEY:
        raise ApiError(
            400,
            f"idempotency_key: longer than {MAX_IDEMPOTENCY_KEY} characters",
            field="idempotency_key",
        )
    return MessageRequest(
        channel=channel, text=text, thread=text_field("thread", required=False), idempotency_key=key
    )


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def build_app(
    backend: ApiBackend,
    *,
    token: str | None = None,
    max_body: int = DEFAULT_MAX_BODY,
    provider_routes: Sequence[HttpRoute] = (),
    agent_socket: Handler | None = None,
) -> web.Application:
    """The aiohttp application serving ``backend``; ``agent_socket`` serves ``GET /v1/agents``
    (``runtime.agent_socket``), which checks its own tokens before the upgrade."""
    guard = _guard(token=token, own_auth=(AGENT_SOCKET_PATH,) if agent_socket else ())
    routes = _Routes(backend, max_body=max_body)
    app = web.Application(middlewares=[guard], client_max_size=max_body)
    app.router.add_post("/v1/events", routes.post_events)
    app.router.add_post("/v1/messages", routes.post_messages)
    app.router.add_get("/healthz", routes.get_health)
    app.router.add_get("/v1/status", routes.get_status)
    app.router.add_get("/metrics", routes.get_metrics)
    if agent_socket is not None:
        app.router.add_get(AGENT_SOCKET_PATH, agent_socket)
    for route in provider_routes:
        app.router.add_route(route.method, route.path, _adapt(route))
    return app


def _guard(*, token: str | None, own_auth: Sequence[str]) -> Middleware:
    """The middleware every request passes: headers that are text, the bearer token on
    ``/v1/*`` and ``/metrics`` (but not on ``own_auth`` paths, which check their own), and
    every ``ApiError`` or unexpected error answered as JSON."""
    expected = f"Bearer {token}".encode() if token else None

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        bad_header = _header_problem(request)
        if bad_header is not None:
            return _error(bad_header)
        protected = request.path.startswith("/v1/") or request.path == "/metrics"
        if protected and "Origin" in request.headers:
            # Only a browser sends Origin: a web page the user has open must not post to their
            # channels or connect as an agent (a POST of text/plain needs no CORS preflight).
            return _error(ApiError(403, "requests from web pages (with an Origin) are refused"))
        if request.path in own_auth:
            protected = False  # the socket accepts per-agent tokens too, and checks them itself
        if expected is not None and protected:
            given = request.headers.get("Authorization")
            if given is None:
                return _error(ApiError(401, "missing Authorization: Bearer <token> header"))
            if not hmac.compare_digest(given.encode(), expected):
                return _error(ApiError(403, "wrong bearer token"))
        try:
            return await handler(request)
        except ApiError as exc:
            return _error(exc)
        except (web.HTTPException, ConnectionResetError):  # the client left: nobody to answer
            raise
        except Exception:
            log.exception("unexpected error answering %s %s", request.method, request.path)
            return web.json_response({"error": "internal error; see the gateway log"}, status=500)

    return guard


class _Routes:
    """The API's own routes, each a thin shell over one ``ApiBackend`` call."""

    def __init__(self, backend: ApiBackend, *, max_body: int) -> None:
        self.backend = backend
        self.max_body = max_body

    async def post_events(self, request: web.Request) -> web.Response:
        raw = await _read_body(request, self.max_body)
        # A batch of plain status changes is read in C (ADR 0150); any other body, and every
        # body that is refused, is read the general way, which names what was wrong.
        events = status_batch(raw)
        ignored = 0  # status changes, every one
        if events is None:
            events = parse_events_body(_json_of(raw), text_checked=True)
            ignored = [*map(type, events)].count(UnknownEvent)  # in C: no bytecode per event
        await self.backend.accept_events(events)
        # Two integers: formatted as json.dumps would, without its encoder's Python calls.
        text = f'{{"accepted": {len(events)}, "ignored": {ignored}}}'
        return web.json_response(text=text, status=202)

    async def post_messages(self, request: web.Request) -> web.Response:
        data = await _read_json(request, self.max_body)
        message = parse_message_request(
            data,
            channels=self.backend.channel_names(),
            header_key=request.headers.get("Idempotency-Key"),
        )
        receipt = await self.backend.accept_message(message)
        return web.json_response(
            {"obligation": receipt.obligation, "duplicate": receipt.duplicate}, status=202
        )

    async def get_health(self, request: web.Request) -> web.Response:
        health = await self.backend.health()
        unhealthy = health.unhealthy
        body = {
            "status": "unhealthy" if unhealthy else "ok",
            "unhealthy": unhealthy,
            "channels": health.channels,
            "providers": health.providers,
        }
        return web.json_response(body, status=503 if unhealthy else 200)

    async def get_status(self, request: web.Request) -> web.Response:
        return web.json_response(await self.backend.status())

    async def get_metrics(self, request: web.Request) -> web.Response:
        body = await self.backend.metrics_text()
        return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4"})


def _adapt(route: HttpRoute) -> Handler:
    async def handle(request: web.Request) -> web.StreamResponse:
        neutral = HttpRequest(
            method=request.method,
            path=request.path,
            headers=dict(request.headers),
            body=await _body_of(request),
            query=dict(request.query),
        )
        response = await route.handler(neutral)
        return web.Response(
            status=response.status,
            body=response.body,
            headers={**response.headers, "Content-Type": response.content_type},
        )

    return handle
