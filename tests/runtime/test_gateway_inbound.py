"""One inbound path: a message on a provider's HTTP route passes the same in-process dedup and
bot filter as one on its connection, before the conversation log (real time, SQLite)."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import pytest

from bridge_core.config import parse_config
from bridge_core.conversation import LogRecord, Turn
from bridge_core.plugins import create_plugin_manager
from bridge_core.provider import (
    Capabilities,
    ChatProvider,
    HttpRequest,
    HttpResponse,
    HttpRoute,
    InboundMessage,
    InboundSink,
    MessageRef,
)
from bridge_core.runtime import Gateway, GatewayOptions

pytestmark = pytest.mark.usefixtures("builtin_plugins_only")

ROUTE = "/two-ways/events"


def message(message_id: str, *, bot: bool = False) -> InboundMessage:
    return InboundMessage(
        message_id=message_id, channel="C1", author="ann", text="hi", at=time.time(),
        author_is_bot=bot,
    )  # fmt: skip


class TwoWays(ChatProvider):
    """A platform that delivers on a connection and on an HTTP route (as Slack can)."""

    name = "two-ways"
    capabilities = Capabilities(edit=False, max_length=1000, inbound=True)

    def __init__(self) -> None:
        self.connection: InboundSink | None = None
        self.connected = anyio.Event()

    async def post(self, channel: str, text: str, *, thread: str | None = None) -> MessageRef:
        return MessageRef(channel, f"r{time.monotonic_ns()}")

    async def receive(self, sink: InboundSink) -> None:
        self.connection = sink
        self.connected.set()
        await anyio.sleep_forever()

    def http_routes(self, sink: InboundSink) -> Sequence[HttpRoute]:
        async def events(request: HttpRequest) -> HttpResponse:
            body = json.loads(request.body)
            await sink(message(body["id"], bot=body.get("bot", False)))
            return HttpResponse(body=b"{}")

        return [HttpRoute("POST", ROUTE, events)]


@pytest.mark.anyio
async def test_a_route_replay_and_a_bots_message_are_dropped_as_a_connections_are(
    tmp_path: Path,
) -> None:
    config = parse_config(
        {
            "profiles": {"p": {"provider": "console", "settings": {"output": "none"}}},
            "channels": {"ops": {"profile": "p", "channel_id": "C1"}},
            "stores": {"ledger": str(tmp_path / "bridge.sqlite3")},
        },
        providers=create_plugin_manager().providers,
    )

    async def agent(turn: Turn, history: Sequence[LogRecord]) -> str:
        return "noted"

    provider = TwoWays()
    gateway = Gateway(
        config,
        options=GatewayOptions(port=0, settle=0.0, heartbeat=0.2),
        providers={"p": provider},
        agents={"ops": agent},
    )
    async with gateway, aiohttp.ClientSession() as http:
        log = gateway.channels["ops"].log
        assert log is not None
        reached_log: list[str] = []
        admit = log.admit

        async def counted(inbound: InboundMessage) -> Any:
            reached_log.append(inbound.message_id)
            return await admit(inbound)

        log.admit = counted  # type: ignore[method-assign]

        async def on_route(message_id: str, *, bot: bool = False) -> None:
            assert gateway.url is not None
            async with http.post(gateway.url + ROUTE, json={"id": message_id, "bot": bot}) as r:
                assert r.status == 200

        with anyio.fail_after(5):
            await provider.connected.wait()
        connection = provider.connection
        assert connection is not None

        await connection(message("c1"))
        await connection(message("c1"))  # a replay on the connection
        await connection(message("c2", bot=True))  # the bot's own message
        assert reached_log == ["c1"]

        await on_route("r1")
        await on_route("r1")  # a replay on the route (Slack retrying an event)
        await on_route("r2", bot=True)
        assert reached_log == ["c1", "r1"]

        # one dedup per profile, whichever way a message came: the same id the other way is a
        # replay too
        await on_route("c1")
        await connection(message("r1"))
        assert reached_log == ["c1", "r1"]

        records = await log.read(after_seq=0, limit=100)
        assert [r.message_id for r in records if isinstance(r, Turn)] == ["c1", "r1"]
