"""Turns delivered to connected agents, against floors measured in the same run.

The gateway runs in this process (console provider writing nothing, SQLite log and ledger,
settle 0); turns are admitted with ``gateway.inbound`` as a provider's sink would. Three ways of
handing the same turns out:

1. connected: an SDK agent in another process (``/v1/agents``, concurrency 64 like the
   in-process member) that answers each turn at once and notes when it arrived;
2. floor, in process: the same turns to an in-process agent (the gateway's own member);
3. floor, bare socket: an aiohttp WebSocket server pushing frames of a turn's size to a client
   in another process that answers each (no log, no ledger, no ownership).

For each: throughput (turns a second, all admitted at once over 100 conversations, until the
last one reached the agent) and latency from admission (the turn's ``inserted_at``, the log's
clock on this machine) to the agent, at a low rate, p50 and p99.

Run: ``python bench/bench_agents.py [--turns 1000] [--latency-turns 200] [--rate 50]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _figures import Figure, print_table
from aiohttp import web

from bridge_core.config import parse_config
from bridge_core.conversation import LogRecord, Turn
from bridge_core.plugins import create_plugin_manager
from bridge_core.provider import InboundMessage
from bridge_core.runtime import Gateway, GatewayOptions

AGENT = """
import json, sys, time, anyio
from bridge_core.agent import connect

async def main(url, count):
    seen = []
    async with connect(url, group="bench", channels=["ops"], concurrency=64) as session:
        print("ready", flush=True)
        async with anyio.create_task_group() as tg:
            async for turn in session:
                seen.append((time.time(), turn.inserted_at))
                tg.start_soon(turn.reply, "ok")
                if len(seen) == count:
                    break
    print(json.dumps(seen), flush=True)

anyio.run(main, sys.argv[1], int(sys.argv[2]))
"""

SOCKET_CLIENT = """
import asyncio, json, sys, time, aiohttp

async def main(url, count):
    seen = []
    async with aiohttp.ClientSession() as http, http.ws_connect(url) as ws:
        print("ready", flush=True)
        async for frame in ws:
            data = json.loads(frame.data)
            seen.append((time.time(), data["inserted_at"]))
            await ws.send_str(json.dumps({"type": "reply", "turn": data["turn"], "text": "ok"}))
            if len(seen) == count:
                break
    print(json.dumps(seen), flush=True)

asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"""


def config(tmp: Path, *, in_process: bool) -> Any:
    ops: dict[str, Any] = {"profile": "con", "channel_id": "ops", "agent_group": "bench"}
    data = {
        "profiles": {
            "con": {
                "provider": "console",
                "settings": {"transcript": str(tmp / "t.jsonl"), "output": "none",
                             "budget": "unlimited"},
            }
        },
        "channels": {"ops": ops},
        "stores": {"ledger": str(tmp / "bridge.sqlite3")},
        "api": {"port": 0},
    }  # fmt: skip
    return parse_config(data, providers=create_plugin_manager().providers)


def message(i: int, conversations: int) -> InboundMessage:
    return InboundMessage(
        message_id=f"b{i}-{time.monotonic_ns()}",
        channel="ops",
        author=f"user{i % conversations}",
        text=f"question number {i} about the build",
        at=time.time(),
    )


async def admit_all(gateway: Gateway, count: int, *, rate: float | None) -> float:
    """Admit ``count`` turns: paced at ``rate``, or all at once (64 admissions in flight, as a
    busy provider's sink would, so the log's group commit takes them in batches)."""
    started = time.time()
    if rate is not None:
        for i in range(count):
            await gateway.inbound("con", message(i, 100))
            await asyncio.sleep(1.0 / rate)
        return started
    numbers = iter(range(count))

    async def admitter() -> None:
        for i in numbers:
            await gateway.inbound("con", message(i, 100))

    await asyncio.gather(*(admitter() for _ in range(64)))
    return started


async def child(script: str, url: str, count: int) -> asyncio.subprocess.Process:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, url, str(count), stdout=subprocess.PIPE
    )
    assert process.stdout is not None
    assert (await process.stdout.readline()).strip() == b"ready"
    return process


async def collect(process: asyncio.subprocess.Process) -> list[tuple[float, float]]:
    assert process.stdout is not None
    line = await process.stdout.readline()
    await process.wait()
    return [tuple(pair) for pair in json.loads(line)]  # type: ignore[misc]


def summary(started: float, seen: Sequence[tuple[float, float]]) -> tuple[float, float, float]:
    """(turns per second, p50 ms, p99 ms) from (arrival, inserted_at) pairs."""
    last = max(arrival for arrival, _ in seen)
    rate = len(seen) / (last - started)
    latencies = sorted((arrival - inserted) * 1000 for arrival, inserted in seen)
    p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]
    return rate, statistics.median(latencies), p99


async def connected(count: int, rate: float | None) -> list[tuple[float, float]]:
    with tempfile.TemporaryDirectory() as tmp:
        options = GatewayOptions(port=0, settle=0.0, heartbeat=1.0)
        async with Gateway(config(Path(tmp), in_process=False), options=options) as gateway:
            assert gateway.url is not None
            url = gateway.url.replace("http://", "ws://") + "/v1/agents"
            agent = await child(AGENT, url, count)
            started = await admit_all(gateway, count, rate=rate)
            seen = await collect(agent)
        return [(started, 0.0), *seen]


async def in_process(count: int, rate: float | None) -> list[tuple[float, float]]:
    seen: list[tuple[float, float]] = []
    done = asyncio.Event()

    async def agent(turn: Turn, history: Sequence[LogRecord]) -> str:
        seen.append((time.time(), turn.inserted_at))
        if len(seen) == count:
            done.set()
        return "ok"

    with tempfile.TemporaryDirectory() as tmp:
        options = GatewayOptions(port=0, settle=0.0, heartbeat=1.0, http=False)
        gateway = Gateway(
            config(Path(tmp), in_process=True), options=options, agents={"ops": agent}
        )
        async with gateway:
            await asyncio.sleep(0.1)
            started = await admit_all(gateway, count, rate=rate)
            await done.wait()
    return [(started, 0.0), *seen]


async def bare_socket(count: int, rate: float | None) -> list[tuple[float, float]]:
    ready: asyncio.Future[web.WebSocketResponse] = asyncio.get_running_loop().create_future()
    finished = asyncio.Event()

    async def handler(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        ready.set_result(ws)
        async for _ in ws:
            pass
        finished.set()
        return ws

    app = web.Application()
    app.router.add_get("/ws", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    client = await child(SOCKET_CLIENT, f"ws://{host}:{port}/ws", count)
    ws = await ready
    started = time.time()
    for i in range(count):
        frame = {
            "type": "turn", "turn": f"ops/{i}", "channel": "ops",
            "conversation": f"ops/u/user{i % 100}", "seq": i, "inserted_at": time.time(),
            "message_id": f"b{i}", "author": f"user{i % 100}",
            "text": f"question number {i} about the build", "history": [],
        }  # fmt: skip
        await ws.send_str(json.dumps(frame))
        if rate is not None:
            await asyncio.sleep(1.0 / rate)
    seen = await collect(client)
    await runner.cleanup()
    return [(started, 0.0), *seen]


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--latency-turns", type=int, default=200)
    parser.add_argument("--rate", type=float, default=50.0)
    args = parser.parse_args()
    print_table(await measure(args.turns, args.latency_turns, args.rate))


def figures(*, quick: bool = False) -> list[Figure]:
    """This module's figures (``bench/_figures.py``); ``quick``: 200 turns, 50 paced."""
    turns, paced = (200, 30) if quick else (1000, 200)
    return asyncio.run(measure(turns, paced, 50.0))


async def measure(turns: int, latency_turns: int, pace: float) -> list[Figure]:
    args = argparse.Namespace(turns=turns, latency_turns=latency_turns, rate=pace)
    found: list[Figure] = []
    measured: dict[str, tuple[float, float]] = {}
    print(f"load average before: {os.getloadavg()}")
    for name, run in (("connected agent", connected), ("in-process agent (floor)", in_process),
                      ("bare aiohttp socket (floor)", bare_socket)):  # fmt: skip
        burst = await run(args.turns, None)
        rate, _, _ = summary(burst[0][0], burst[1:])
        paced = await run(args.latency_turns, args.rate)
        _, p50, p99 = summary(paced[0][0], paced[1:])
        print(
            f"{name:30s} {rate:8.0f} turns/s ({args.turns} at once)   "
            f"admission->agent at {args.rate:g}/s: p50 {p50:6.2f} ms  p99 {p99:6.2f} ms"
        )
        measured[name] = (rate, p99)
    print(f"load average after: {os.getloadavg()}")
    (ours, ours_p99), (floor, floor_p99) = (
        measured["connected agent"],
        measured["bare aiohttp socket (floor)"],
    )
    in_process_rate, _ = measured["in-process agent (floor)"]
    found += [
        Figure(
            name="agents.connected_turns",
            value=ours,
            unit="turns/s",
            floor=floor,
            label="turns to a connected agent (floor: bare aiohttp WebSocket)",
        ),
        Figure(
            name="agents.in_process_turns",
            value=in_process_rate,
            unit="turns/s",
            floor=floor,
            label="turns to an in-process agent (floor: bare aiohttp WebSocket)",
        ),
        Figure(
            name="agents.connected_p99",
            value=ours_p99,
            unit="ms",
            floor=floor_p99,
            higher_is_better=False,
            label=f"admission -> connected agent p99 at {pace:g}/s (floor: bare socket)",
        ),
    ]
    return found


if __name__ == "__main__":
    asyncio.run(main())
