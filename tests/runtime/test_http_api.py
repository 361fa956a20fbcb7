"""The HTTP API's contract against a recording backend: bad inputs are 4xx naming the problem,
never 500, and nothing of a rejected request is accepted. Text the API cannot carry (ADR 0070):
a lone surrogate or a NUL anywhere in a body, and a header that is not UTF-8, are a 400 naming
the field or header, whatever the route; other control characters pass."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

import anyio
import pytest
from aiohttp.test_utils import TestClient, TestServer

from bridge_core.events import AgentSpawned, FleetEvent, UnknownEvent
from bridge_core.provider import HttpRequest, HttpResponse, HttpRoute
from bridge_core.runtime.http_api import (
    ApiError,
    Health,
    MessageReceipt,
    MessageRequest,
    build_app,
)


class RecordingBackend:
    def __init__(self) -> None:
        self.events: list[FleetEvent] = []
        self.messages: list[MessageRequest] = []
        self.keys: set[str] = set()
        self.healthy = True
        self.closed = False

    def channel_names(self) -> Sequence[str]:
        return ["ops", "alerts"]

    async def accept_events(self, events: Sequence[FleetEvent]) -> None:
        if self.closed:
            raise ApiError(503, "shutting down")
        self.events.extend(events)

    async def accept_message(self, request: MessageRequest) -> MessageReceipt:
        key = request.idempotency_key
        duplicate = key is not None and key in self.keys
        if key is not None:
            self.keys.add(key)
        if not duplicate:
            self.messages.append(request)
        return MessageReceipt(obligation=f"ob-{key or len(self.messages)}", duplicate=duplicate)

    async def health(self) -> Health:
        return Health(
            channels={"ops": {"healthy": self.healthy}, "alerts": {"healthy": True}},
            providers={"console": {"healthy": True}},
        )

    async def metrics_text(self) -> bytes:
        return b"chatbridge_up 1\n"


async def echo_route(request: HttpRequest) -> HttpResponse:
    return HttpResponse(status=200, body=request.body[::-1], content_type="text/plain")


@pytest.fixture
async def backend() -> RecordingBackend:
    return RecordingBackend()


@pytest.fixture
async def client(backend: RecordingBackend) -> AsyncIterator[TestClient[Any, Any]]:
    app = build_app(
        backend, max_body=4096, provider_routes=[HttpRoute("POST", "/slack/events", echo_route)]
    )
    async with TestClient(TestServer(app)) as c:
        yield c


@pytest.fixture
async def token_client(backend: RecordingBackend) -> AsyncIterator[TestClient[Any, Any]]:
    async with TestClient(TestServer(build_app(backend, token="s3cret-token"))) as c:
        yield c


EVENT = {"kind": "AgentSpawned", "agent": "a1", "workspace": "w1"}


@pytest.mark.anyio
async def test_one_event_and_a_batch_are_accepted(
    client: TestClient[Any, Any], backend: RecordingBackend
) -> None:
    response = await client.post("/v1/events", json=EVENT)
    assert response.status == 202
    assert await response.json() == {"accepted": 1, "ignored": 0}
    batch = [EVENT, {"kind": "SomethingNew", "agent": "a2", "extra": 1}]
    response = await client.post("/v1/events", json=batch)
    assert response.status == 202
    assert await response.json() == {"accepted": 2, "ignored": 1}
    assert backend.events[0] == AgentSpawned("a1", "w1")
    assert isinstance(backend.events[2], UnknownEvent)
    assert backend.events[2].unknown_kind == "SomethingNew"


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("body", "status", "field", "index", "words"),
    [
        (b"{not json", 400, "body", None, "malformed JSON"),
        (b"", 400, "body", None, "empty"),
        (b"\xff\xfe", 400, "body", None, "UTF-8"),
        (b"42", 400, None, None, "array"),
        (b"[" * 2000 + b"]" * 2000, 400, "body", None, "will not read"),
        (
            json.dumps([EVENT, {"kind": "StatusChanged", "agent": "a1"}]).encode(),
            400,
            "status",
            1,
            "event 1",
        ),
        (
            json.dumps([EVENT, {"kind": "AgentSpawned", "agent": 7}]).encode(),
            400,
            "agent",
            1,
            "string",
        ),
        (json.dumps([EVENT, "nope"]).encode(), 400, "event", 1, "object"),
        (
            b'{"kind": "AgentSpawned", "agent": "a", "at": 1' + b"0" * 400 + b"}",
            400,
            "at",
            None,
            "finite number",
        ),  # JSON allows it; no float holds it
        (json.dumps({"agent": "a"}).encode(), 400, "kind", None, "required"),
        (
            json.dumps({"kind": "AgentFinished", "agent": "a", "outcome": "exploded"}).encode(),
            400,
            "outcome",
            None,
            "done|failed",
        ),
        (
            b"[" + b",".join([json.dumps(EVENT).encode()] * 200) + b"]",
            413,
            None,
            None,
            "4096 bytes",
        ),
    ],
)
async def test_bad_event_bodies_are_refused_whole(
    client: TestClient[Any, Any],
    backend: RecordingBackend,
    body: bytes,
    status: int,
    field: str | None,
    index: int | None,
    words: str,
) -> None:
    response = await client.post(
        "/v1/events", data=body, headers={"Content-Type": "application/json"}
    )
    assert response.status == status
    payload = await response.json()
    assert words in payload["error"]
    assert payload.get("field") == field
    assert payload.get("index") == index
    assert backend.events == []


@pytest.mark.anyio
async def test_refused_while_shutting_down(
    client: TestClient[Any, Any], backend: RecordingBackend
) -> None:
    backend.closed = True
    response = await client.post("/v1/events", json=EVENT)
    assert response.status == 503
    assert "shutting down" in (await response.json())["error"]


@pytest.mark.anyio
async def test_messages_validate_fields_and_keys(
    client: TestClient[Any, Any], backend: RecordingBackend
) -> None:
    ok = await client.post(
        "/v1/messages", json={"channel": "ops", "text": "hi", "idempotency_key": "k1"}
    )
    assert ok.status == 202
    assert await ok.json() == {"obligation": "ob-k1", "duplicate": False}
    again = await client.post(
        "/v1/messages", json={"channel": "ops", "text": "hi"}, headers={"Idempotency-Key": "k1"}
    )
    assert again.status == 202
    assert (await again.json())["duplicate"] is True
    assert len(backend.messages) == 1

    cases: list[tuple[Any, dict[str, str], int, str]] = [
        ({"text": "x"}, {}, 400, "channel"),
        ({"channel": "nope", "text": "x"}, {}, 404, "channel"),
        ({"channel": "ops", "text": 5}, {}, 400, "text"),
        ({"channel": "ops", "text": "  "}, {}, 400, "text"),
        ({"channel": "ops", "text": "x", "thread": []}, {}, 400, "thread"),
        ({"channel": "ops", "text": "x", "thred": "t"}, {}, 400, "thred"),
        (
            {"channel": "ops", "text": "x", "idempotency_key": "a"},
            {"Idempotency-Key": "b"},
            400,
            "idempotency_key",
        ),
        ({"channel": "ops", "text": "x", "idempotency_key": "k" * 201}, {}, 400, "idempotency_key"),
        (["ops"], {}, 400, ""),
    ]
    for body, headers, status, field in cases:
        response = await client.post("/v1/messages", json=body, headers=headers)
        assert response.status == status, body
        payload = await response.json()
        assert payload.get("field", "") == field, body
        assert payload["error"]
    assert len(backend.messages) == 1


@pytest.mark.anyio
async def test_health_names_the_unhealthy(
    client: TestClient[Any, Any], backend: RecordingBackend
) -> None:
    response = await client.get("/healthz")
    assert response.status == 200
    assert (await response.json())["status"] == "ok"
    backend.healthy = False
    response = await client.get("/healthz")
    assert response.status == 503
    assert (await response.json())["unhealthy"] == ["channel ops"]


@pytest.mark.anyio
async def test_provider_routes_are_mounted(client: TestClient[Any, Any]) -> None:
    response = await client.post("/slack/events", data=b"abc")
    assert response.status == 200
    assert await response.read() == b"cba"


@pytest.mark.anyio
async def test_bearer_token(token_client: TestClient[Any, Any], backend: RecordingBackend) -> None:
    missing = await token_client.post("/v1/events", json=EVENT)
    assert missing.status == 401
    assert "missing" in (await missing.json())["error"]
    wrong = await token_client.post(
        "/v1/events", json=EVENT, headers={"Authorization": "Bearer nope"}
    )
    assert wrong.status == 403
    metrics = await token_client.get("/metrics")
    assert metrics.status == 401
    assert backend.events == []
    good = await token_client.post(
        "/v1/events", json=EVENT, headers={"Authorization": "Bearer s3cret-token"}
    )
    assert good.status == 202
    assert (await token_client.get("/healthz")).status == 200
    scrape = await token_client.get("/metrics", headers={"Authorization": "Bearer s3cret-token"})
    assert await scrape.read() == b"chatbridge_up 1\n"


# ------------------------------------------------------------------ text that cannot be carried

# Every class of code point that cannot be carried, as a JSON client would send it.
BAD = {
    "lone high surrogate": "x\ud800",
    "lone low surrogate": "\udfffx",
    "pair in the wrong order": "\udc00\ud800",
    "high surrogate at the end of a pair's place": "a\ud83d b",
    "NUL": "a\0b",
}


@pytest.fixture
async def guarded(backend: RecordingBackend) -> AsyncIterator[TestClient[Any, Any]]:
    app = build_app(
        backend,
        token="s3cret-token",
        provider_routes=[HttpRoute("POST", "/slack/events", echo_route)],
    )
    async with TestClient(TestServer(app)) as c:
        yield c


AUTH = {"Authorization": "Bearer s3cret-token", "Content-Type": "application/json"}


def _raw(value: Any) -> bytes:
    # json.dumps escapes surrogates as \ud800: exactly what a careless client sends
    return json.dumps(value).encode("ascii")


@pytest.mark.anyio
@pytest.mark.parametrize("bad", list(BAD.values()), ids=list(BAD))
@pytest.mark.parametrize(
    ("body", "field", "index"),
    [
        (lambda v: {**EVENT, "agent": v}, "agent", None),
        (lambda v: {**EVENT, "workspace": v}, "workspace", None),
        (lambda v: {**EVENT, "title": v}, "title", None),
        (lambda v: {"kind": "StatusChanged", "agent": "a", "status": v}, "status", None),
        (lambda v: {"kind": v, "agent": "a"}, "kind", None),
        (lambda v: {"kind": "New", "agent": "a", "extra": {"deep": [1, v]}}, "extra.deep.1", None),
        (lambda v: [EVENT, {**EVENT, "agent": v}], "agent", 1),
    ],
)
async def test_events_with_text_that_cannot_be_carried_are_refused(
    guarded: TestClient[Any, Any],
    backend: RecordingBackend,
    bad: str,
    body: Any,
    field: str,
    index: int | None,
) -> None:
    response = await guarded.post("/v1/events", data=_raw(body(bad)), headers=AUTH)
    assert response.status == 400
    payload = await response.json()
    assert payload["field"] == field
    assert payload.get("index") == index
    assert "surrogate" in payload["error"] or "NUL" in payload["error"]
    assert backend.events == []


@pytest.mark.anyio
async def test_a_bad_key_is_named_made_readable(
    guarded: TestClient[Any, Any], backend: RecordingBackend
) -> None:
    response = await guarded.post("/v1/events", data=_raw({**EVENT, "ke\ud800y": 1}), headers=AUTH)
    assert response.status == 400
    payload = await response.json()
    assert payload["field"] == "ke\ufffdy"
    assert "key" in payload["error"]
    assert backend.events == []


@pytest.mark.anyio
@pytest.mark.parametrize("bad", list(BAD.values()), ids=list(BAD))
@pytest.mark.parametrize("field", ["channel", "text", "thread", "idempotency_key"])
async def test_messages_with_text_that_cannot_be_carried_are_refused(
    guarded: TestClient[Any, Any], backend: RecordingBackend, bad: str, field: str
) -> None:
    body = {"channel": "ops", "text": "hello", field: bad}
    response = await guarded.post("/v1/messages", data=_raw(body), headers=AUTH)
    assert response.status == 400
    assert (await response.json())["field"] == field
    assert backend.messages == []


@pytest.mark.anyio
async def test_control_characters_and_pairs_are_text(
    guarded: TestClient[Any, Any], backend: RecordingBackend
) -> None:
    text = "bell\a esc\x1b]0;title\x07 del\x7f c1\x9b tab\t 😀 \ufeff\uffff"
    response = await guarded.post(
        "/v1/messages", data=_raw({"channel": "ops", "text": text}), headers=AUTH
    )
    assert response.status == 202
    assert backend.messages[0].text == text
    response = await guarded.post("/v1/events", data=_raw({**EVENT, "title": text}), headers=AUTH)
    assert response.status == 202


async def _raw_request(client: TestClient[Any, Any], head: bytes, body: bytes = b"") -> bytes:
    """Send bytes the client library would refuse to (a header that is not UTF-8)."""
    port = client.server.port
    assert port is not None
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        await stream.send(head + b"\r\n\r\n" + body)
        answer = b""
        with anyio.fail_after(5):
            while b"\r\n\r\n" not in answer:
                answer += await stream.receive()
    return answer


HEAD = (
    b"POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Connection: close\r\nContent-Length: %d"
)


@pytest.mark.anyio
@pytest.mark.parametrize(
    "header",
    [
        b"Authorization: Bearer \xff\xfe",
        b"Authorization: Bearer s3cret-token\xc3",
        b"Authorization: \xe9t\xe9",
        b"Idempotency-Key: \x80\x81",
        b"X-Anything: caf\xe9",
    ],
)
async def test_headers_that_are_not_utf8_are_a_400(
    guarded: TestClient[Any, Any], backend: RecordingBackend, header: bytes
) -> None:
    body = _raw(EVENT)
    answer = await _raw_request(guarded, HEAD % len(body) + b"\r\n" + header, body)
    status_line = answer.split(b"\r\n", 1)[0]
    assert status_line.startswith(b"HTTP/1.1 400"), answer
    assert backend.events == []
    # and the gateway keeps serving
    ok = await guarded.post("/v1/events", data=body, headers=AUTH)
    assert ok.status == 202


@pytest.mark.anyio
async def test_provider_routes_get_the_same_header_check(
    guarded: TestClient[Any, Any],
) -> None:
    head = (
        b"POST /slack/events HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        b"X-Slack-Signature: v0=\xff\r\nContent-Length: 2"
    )
    answer = await _raw_request(guarded, head, b"{}")
    assert answer.startswith(b"HTTP/1.1 400"), answer


@pytest.mark.anyio
@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
async def test_a_body_that_does_not_decompress_is_a_400(
    client: TestClient[Any, Any], backend: RecordingBackend, encoding: str
) -> None:
    for path in ("/v1/messages", "/v1/events"):
        response = await client.post(
            path,
            data=b"not compressed",
            headers={"Content-Encoding": encoding, "Content-Type": "application/json"},
        )
        assert response.status == 400, path
        payload = await response.json()
        assert payload["field"] == "body" and "could not be read" in payload["error"]
    assert backend.messages == [] and backend.events == []


@pytest.mark.anyio
async def test_a_web_page_cannot_post_or_connect(
    client: TestClient[Any, Any], backend: RecordingBackend
) -> None:
    # A POST of text/plain needs no CORS preflight: without this, any page open in the user's
    # browser could post to their channels through a gateway on loopback with no token.
    page = {"Origin": "https://evil.example", "Content-Type": "text/plain"}
    body = json.dumps({"channel": "ops", "text": "posted by a web page"})
    for path in ("/v1/messages", "/v1/events", "/v1/agents"):
        response = await client.post(path, data=body, headers=page)
        assert response.status == 403 and "web pages" in (await response.json())["error"], path
    assert backend.messages == [] and backend.events == []
    plain = await client.post("/v1/messages", json={"channel": "ops", "text": "from a process"})
    assert plain.status == 202
