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
    tmp_path: Path, *, token: str | None = TOKEN, agent: str | None = None
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
    return parse_config(data, providers=create_plugin_manager().providers)


def posts(tmp_path: Path) -> list[str]:
    path = tmp_path / "t.jsonl"
    if not path.exists():
        return []
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return [line["text"] for line in lines if line["op"] == "post"]


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
