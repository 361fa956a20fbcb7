"""A real gateway (console provider, SQLite in a temporary folder) serving ``/v1/agents``, and a
raw WebSocket client (aiohttp's, not the SDK) whose every received frame is checked against the
protocol's JSON Schema."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import jsonschema
import pytest

from bridge_core.config import BridgeConfig, parse_config
from bridge_core.conversation import Frame, Turn
from bridge_core.plugins import create_plugin_manager
from bridge_core.provider import InboundMessage
from bridge_core.runtime import Gateway, GatewayOptions

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "docs" / "agent-protocol.schema.json"
SCHEMA = json.loads(SCHEMA_PATH.read_text())
jsonschema.Draft202012Validator.check_schema(SCHEMA)


def validator(definition: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(
        {"$ref": f"#/$defs/{definition}", "$defs": SCHEMA["$defs"]}
    )


CLIENT = validator("ClientMessage")
SERVER = validator("ServerMessage")


def assert_server_message(frame: str) -> dict[str, Any]:
    """``frame`` is a valid gateway message (every frame the socket tests receive)."""
    data = json.loads(frame)
    SERVER.validate(data)
    return data


def assert_client_message(frame: str) -> dict[str, Any]:
    data = json.loads(frame)
    CLIENT.validate(data)
    return data


def well_formed(kind: str) -> dict[str, Any]:
    """A client message of type ``kind`` with every field well formed (an ``id`` may be added):
    after hello, the gateway refuses each but ``event`` (``second_hello``, or ``not_held``: the
    turn is never one it sent) and acknowledges the ``event``."""
    if kind == "hello":
        return {"type": "hello", "group": "support", "channels": ["ops"], "name": "t"}
    if kind == "event":
        return {"type": "event", "event": []}
    fields = {"busy": {}, "decline": {}, "error": {"message": "m"}}.get(kind, {"text": "x"})
    return {"type": kind, "turn": "ops/99999", **fields}


TOKEN = "api-token-1"
AGENT_TOKEN = "agent-token-1"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def builtin_plugins_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHATBRIDGE_LOAD_PLUGINS", "")
    monkeypatch.setenv("TEST_AGENT_TOKEN", AGENT_TOKEN)


def make_config(
    tmp_path: Path,
    *,
    token: str | None = TOKEN,
    agent: str | None = None,
    budget: dict[str, Any] | None = None,
) -> BridgeConfig:
    ops: dict[str, Any] = {
        "profile": "con",
        "channel_id": "ops",
        "agent_group": "support",
        "notify": {"hold": 0.05},
    }
    if agent is not None:
        ops["agent"] = agent
    api: dict[str, Any] = {"agent_tokens": {"bot-a": {"env": "TEST_AGENT_TOKEN"}}}
    if token is not None:
        api["token"] = token
    data = {
        "profiles": {
            "con": {
                "provider": "console",
                "settings": {"transcript": str(tmp_path / "t.jsonl"), "output": "none"},
            }
        },
        "channels": {
            "ops": ops,
            "dev": {"profile": "con", "channel_id": "dev", "agent_group": "builders"},
            "quiet": {"profile": "con", "channel_id": "quiet"},
        },
        "stores": {"ledger": str(tmp_path / "bridge.sqlite3")},
        "api": api,
    }
    if budget is not None:
        data["profiles"]["con"]["budget"] = budget
    return parse_config(data, providers=create_plugin_manager().providers)


def posts(tmp_path: Path) -> list[str]:
    path = tmp_path / "t.jsonl"
    if not path.exists():
        return []
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return [line["text"] for line in lines if line["op"] == "post"]


def written(tmp_path: Path) -> list[str]:
    """Every text the console posted or edited, in order."""
    path = tmp_path / "t.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return [line["text"] for line in lines if line["op"] in ("post", "edit")]


OPTIONS = GatewayOptions(port=0, settle=0.05, heartbeat=0.2, grace=2.0)


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[Gateway]:
    async with Gateway(make_config(tmp_path), options=OPTIONS) as gw:
        yield gw


class Raw:
    """A raw agent connection: send dicts or text, receive schema-checked dicts."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.received: list[dict[str, Any]] = []

    async def send(self, message: dict[str, Any] | str) -> None:
        await self.ws.send_str(message if isinstance(message, str) else json.dumps(message))

    async def recv(self) -> dict[str, Any]:
        with anyio.fail_after(5.0):
            frame = await self.ws.receive()
        assert frame.type is aiohttp.WSMsgType.TEXT, (frame.type, frame.data, frame.extra)
        data = assert_server_message(frame.data)
        self.received.append(data)
        return data

    async def nothing_for(self, seconds: float) -> None:
        """No frame arrives for ``seconds``."""
        with anyio.move_on_after(seconds):
            frame = await self.ws.receive()
            raise AssertionError(f"expected silence, got {frame.type} {frame.data!r}")

    async def hello(self, channels: list[str] | None = None, **extra: Any) -> dict[str, Any]:
        await self.send(
            {
                "type": "hello",
                "group": "support",
                "channels": channels or ["ops"],
                "name": "t",
                **extra,
            }
        )
        reply = await self.recv()
        assert reply["type"] == "hello", reply
        return reply


class Client:
    def __init__(self, session: aiohttp.ClientSession, url: str) -> None:
        self.session = session
        self.url = url
        self.opened: list[aiohttp.ClientWebSocketResponse] = []

    async def connect(self, token: str | None = TOKEN) -> Raw:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        ws = await self.session.ws_connect(self.url, headers=headers, heartbeat=None)
        self.opened.append(ws)
        return Raw(ws)


@pytest.fixture
async def client(gateway: Gateway) -> AsyncIterator[Client]:
    assert gateway.url is not None
    async with aiohttp.ClientSession() as session:
        c = Client(session, gateway.url.replace("http://", "ws://") + "/v1/agents")
        yield c
        for ws in c.opened:
            await ws.close()


_seq = iter(range(1, 1_000_000))


async def say(gateway: Gateway, text: str, *, author: str = "ann", channel: str = "ops") -> str:
    """A person's message admitted into ``channel``'s log; returns its message id."""
    message_id = f"m{next(_seq)}-{time.monotonic_ns()}"
    admitted = await gateway.inbound(
        "con",
        InboundMessage(
            message_id=message_id, channel=channel, author=author, text=text, at=time.time()
        ),
    )
    assert admitted
    return message_id


async def frames_answering(gateway: Gateway, channel: str = "ops") -> list[Frame]:
    log = gateway.channels[channel].log
    assert log is not None
    records = await log.read(after_seq=0, limit=100_000)
    return [r for r in records if isinstance(r, Frame)]


async def turns_in_log(gateway: Gateway, channel: str = "ops") -> list[Turn]:
    log = gateway.channels[channel].log
    assert log is not None
    return [r for r in await log.read(after_seq=0, limit=100_000) if isinstance(r, Turn)]


class GatewayThread:
    """A gateway on its own asyncio loop in a thread, so the SDK under test can run on trio."""

    def __init__(self, config: BridgeConfig, options: GatewayOptions = OPTIONS) -> None:
        import threading

        self.config = config
        self.options = options
        self.gateway: Gateway | None = None
        self.url = ""
        self._ready = threading.Event()
        self._stop: anyio.Event | None = None
        self._portal: Any = None
        self._thread = threading.Thread(target=self._main, daemon=True)
        self.error: BaseException | None = None

    def _main(self) -> None:
        from anyio.from_thread import start_blocking_portal

        with start_blocking_portal("asyncio") as portal:
            self._portal = portal
            try:
                future, self.gateway = portal.start_task(self._serve)
                assert self.gateway is not None and self.gateway.url is not None
                self.url = self.gateway.url.replace("http://", "ws://") + "/v1/agents"
            except BaseException as error:
                self.error = error
                self._ready.set()
                return
            self._ready.set()
            future.result()

    async def _serve(self, *, task_status: Any) -> None:
        self._stop = anyio.Event()
        async with Gateway(self.config, options=self.options) as gateway:
            task_status.started(gateway)
            await self._stop.wait()

    def start(self) -> GatewayThread:
        self._thread.start()
        self._ready.wait(30)
        if self.error is not None:
            raise self.error
        return self

    def call(self, fn: Any, *args: Any) -> Any:
        """Run ``fn(*args)`` (async) on the gateway's loop and return its result."""
        return self._portal.start_task_soon(fn, *args).result(30)

    def stop(self) -> None:
        if self._stop is not None:
            self._portal.call(self._stop.set)
        self._thread.join(30)
