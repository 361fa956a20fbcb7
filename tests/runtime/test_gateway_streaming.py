"""A streamed reply through the whole gateway (real time, SQLite ledger and log, the console
provider's transcript): one message edited as the agent writes, the final text the ledger's
last edit of it; an agent that fails mid-stream leaves its message saying it was interrupted."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

from bridge_core.config import BridgeConfig, parse_config
from bridge_core.conversation import LogRecord, Turn
from bridge_core.plugins import create_plugin_manager
from bridge_core.provider import InboundMessage
from bridge_core.runtime import Gateway, GatewayOptions
from bridge_core.streams import CURSOR, INTERRUPTED

pytestmark = pytest.mark.usefixtures("builtin_plugins_only")


def make_config(tmp_path: Path) -> BridgeConfig:
    data = {
        "profiles": {
            "con": {
                "provider": "console",
                "settings": {"transcript": str(tmp_path / "t.jsonl"), "output": "none"},
                "budget": {"preset": "unlimited", "edit_spacing": 0.05},
            }
        },
        "channels": {"ops": {"profile": "con", "channel_id": "ops"}},
        "stores": {"ledger": str(tmp_path / "bridge.sqlite3")},
    }
    return parse_config(data, providers=create_plugin_manager().providers)


def transcript(tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "t.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def message(i: int, text: str) -> InboundMessage:
    return InboundMessage(
        message_id=f"m{i}", channel="ops", author="ann", text=text, at=time.time()
    )


WORDS = [f"w{i} " for i in range(40)]


async def streaming_agent(turn: Turn, history: Sequence[LogRecord]) -> AsyncIterator[str]:
    for word in WORDS:
        await anyio.sleep(0.01)
        yield word
    if turn.text == "fail":
        raise RuntimeError("the model went away")


def options() -> GatewayOptions:
    return GatewayOptions(http=False, settle=0.05, heartbeat=0.2, grace=2.0)


async def until(condition: Any, limit: float = 10.0) -> None:
    with anyio.fail_after(limit):
        while not condition():  # noqa: ASYNC110 - waiting on a file another task writes
            await anyio.sleep(0.02)


@pytest.mark.anyio
async def test_a_streamed_reply_is_one_message_whose_last_edit_is_the_final(
    tmp_path: Path,
) -> None:
    full = "".join(WORDS)
    config = make_config(tmp_path)
    async with Gateway(config, options=options(), agents={"ops": streaming_agent}) as gateway:
        await until(lambda: gateway.channels["ops"].member.ready.is_set())
        assert await gateway.inbound("con", message(1, "hi"))
        await until(lambda: any(e["text"] == full for e in transcript(tmp_path)))
        with anyio.fail_after(10):
            while (await gateway.ledger_counts())["delivered"] != 1:  # noqa: ASYNC110
                await anyio.sleep(0.02)
    writes = [e for e in transcript(tmp_path) if e["op"] in ("post", "edit")]
    assert [e["op"] for e in writes].count("post") == 1
    assert len({e["message_id"] for e in writes}) == 1
    assert len(writes) >= 3  # it was seen growing: a post, edits, the final
    assert all(e["text"].endswith(CURSOR) for e in writes[:-1])
    assert writes[-1]["text"] == full


@pytest.mark.anyio
async def test_an_agent_failing_mid_stream_leaves_its_message_saying_so(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    async with Gateway(config, options=options(), agents={"ops": streaming_agent}) as gateway:
        await until(lambda: gateway.channels["ops"].member.ready.is_set())
        assert await gateway.inbound("con", message(1, "fail"))
        await until(lambda: any(e["text"] == INTERRUPTED for e in transcript(tmp_path)))
        counts = await gateway.ledger_counts()
    writes = [e for e in transcript(tmp_path) if e["op"] in ("post", "edit")]
    assert writes[-1]["text"] == INTERRUPTED
    assert len({e["message_id"] for e in writes}) == 1
    assert sum(counts.values()) == 0  # nothing was recorded: there is no final answer
