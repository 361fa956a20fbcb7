"""Liveness on the socket: the gateway pings; a peer that stops answering pongs is a dropped
connection (its member expires), and the SDK answers pings, so an idle session stays one member."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import aiohttp
import anyio
import pytest

from bridge_core.agent import connect
from bridge_core.conversation import Leave, LeaveReason
from bridge_core.runtime import Gateway

from .conftest import OPTIONS, TOKEN, make_config


async def leaves(gateway: Gateway) -> list[Leave]:
    log = gateway.channels["ops"].log
    assert log is not None
    return [r for r in await log.read(after_seq=0, limit=10_000) if isinstance(r, Leave)]


@pytest.mark.anyio
async def test_a_silent_peer_is_dropped_and_expires_while_the_sdk_stays(tmp_path: Path) -> None:
    async with Gateway(make_config(tmp_path), options=OPTIONS) as gateway:
        sockets = gateway.agent_sockets
        assert sockets is not None and gateway.url is not None
        sockets.settings = dataclasses.replace(sockets.settings, ping_interval=1.0)
        url = gateway.url.replace("http://", "ws://") + "/v1/agents"
        async with connect(url, token=TOKEN, group="support", channels=["ops"], name="sdk") as sdk:
            assert sdk.hello is not None
            alive = sdk.hello.members["ops"]
            async with aiohttp.ClientSession() as http:
                # autoping off and never reading: this peer answers no ping
                silent = await http.ws_connect(
                    url, headers={"Authorization": f"Bearer {TOKEN}"}, autoping=False
                )
                await silent.send_json(
                    {"type": "hello", "group": "support", "channels": ["ops"], "name": "mute"}
                )
                with anyio.fail_after(10):
                    while not await leaves(gateway):  # noqa: ASYNC110 - polling the log
                        await anyio.sleep(0.05)
                (leave,) = await leaves(gateway)
                assert leave.reason is LeaveReason.EXPIRED and leave.member.startswith(
                    "support/mute@"
                )
                assert sockets.statistics().drops == 1
                await silent.close()
            await anyio.sleep(2.5)  # two more pings, each answered in time
            assert sdk.connections == 1 and sdk.hello is not None
            assert sdk.hello.members["ops"] == alive
            assert all(r.member != alive for r in await leaves(gateway))
