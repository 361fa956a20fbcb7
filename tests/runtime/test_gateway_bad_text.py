"""A real gateway (console provider, SQLite or PostgreSQL ledger) given text it cannot carry
(ADR 0070): the API refuses it with a 400 on every store alike, never a 500; a platform's or an
agent's text is made valid and delivered; the gateway keeps serving."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import httpx
import psycopg
import pytest

from bridge_core.config import parse_config
from bridge_core.conversation import LogRecord, Turn
from bridge_core.plugins import create_plugin_manager
from bridge_core.provider import InboundMessage
from bridge_core.runtime import Gateway, GatewayOptions
from bridge_core.testing.services import require_postgres
from bridge_core.text import REPLACEMENT

pytestmark = pytest.mark.usefixtures("builtin_plugins_only")

BAD = ["x\ud800", "\udfffx", "\udc00\ud800", "a\0b"]


def posts(tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "t.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text("utf-8").splitlines()]


async def until(condition: Any, limit: float = 10.0) -> None:
    with anyio.fail_after(limit):
        while not condition():  # noqa: ASYNC110 - waiting on a file another task writes
            await anyio.sleep(0.01)


async def agent(turn: Turn, history: Sequence[LogRecord]) -> str:
    # an agent that echoes back a NUL and a lone surrogate of its own
    return f"heard [{turn.text}] by [{turn.author}] plus \0 and \udc80"


@pytest.fixture(params=["sqlite", "postgres"])
async def gateway(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Gateway]:
    prefix = f"t{uuid.uuid4().hex[:10]}_"
    ledger = str(tmp_path / "bridge.sqlite3")
    if request.param == "postgres":
        ledger = require_postgres()
    config = parse_config(
        {
            "profiles": {
                "con": {
                    "provider": "console",
                    "settings": {"transcript": str(tmp_path / "t.jsonl"), "output": "none"},
                }
            },
            "channels": {"ops": {"profile": "con", "channel_id": "ops"}},
            "stores": {"ledger": ledger},
        },
        path=tmp_path / "bridge.toml",  # beside a PostgreSQL ledger, the log goes in tmp_path
        providers=create_plugin_manager().providers,
    )
    made = Gateway(
        config,
        options=GatewayOptions(port=0, settle=0.0, heartbeat=0.2, ledger_table_prefix=prefix),
        agents={"ops": agent},
    )
    try:
        async with made:
            yield made
    finally:
        if request.param == "postgres":
            async with await psycopg.AsyncConnection.connect(ledger, autocommit=True) as conn:
                for table in ("ledger", "owners", "kv"):
                    await conn.execute(f"DROP TABLE IF EXISTS {prefix}{table}")


def body(value: Any) -> bytes:
    return json.dumps(value).encode("ascii")  # surrogates as \ud800 escapes, as a client sends


@pytest.mark.anyio
async def test_the_api_refuses_what_no_store_can_carry_alike(
    gateway: Gateway, tmp_path: Path
) -> None:
    headers = {"Content-Type": "application/json"}
    async with httpx.AsyncClient(base_url=str(gateway.url)) as client:
        for bad in BAD:
            for field in ("text", "thread", "idempotency_key"):
                message = {"channel": "ops", "text": "hello", field: bad}
                answer = await client.post("/v1/messages", content=body(message), headers=headers)
                assert answer.status_code == 400, (field, bad)
                assert answer.json()["field"] == field
            event = {"kind": "AgentSpawned", "agent": bad}
            answer = await client.post("/v1/events", content=body(event), headers=headers)
            assert answer.status_code == 400
            assert answer.json()["field"] == "agent"
        assert not any((await gateway.ledger_counts()).values())  # nothing was recorded
        controls = "esc\x1b]0;t\x07 c1\x9b del\x7f tab\t"
        answer = await client.post(
            "/v1/messages", content=body({"channel": "ops", "text": controls}), headers=headers
        )
        assert answer.status_code == 202
        await until(lambda: any(p["text"] == controls for p in posts(tmp_path)))
        assert (await client.get("/healthz")).status_code == 200


@pytest.mark.anyio
async def test_platform_and_agent_text_is_made_valid_and_answered(
    gateway: Gateway, tmp_path: Path
) -> None:
    message = InboundMessage(
        message_id="m\ud8001",
        channel="ops",
        author="ann\udcff",
        text="hi \ud83d there \0",
        at=time.time(),
        thread=None,
    )
    assert await gateway.inbound("con", message)

    def replies() -> list[str]:
        return [p["text"] for p in posts(tmp_path) if p["op"] == "post"]

    await until(lambda: len(replies()) == 1)
    expected = (
        f"heard [hi {REPLACEMENT} there {REPLACEMENT}] by [ann{REPLACEMENT}] "
        f"plus {REPLACEMENT} and {REPLACEMENT}"
    )
    assert replies() == [expected]
    # the made-valid id is the dedup key: the same platform message again is a replay
    assert not await gateway.inbound("con", message)
