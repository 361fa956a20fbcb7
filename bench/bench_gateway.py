"""Gateway throughput and latency, each against a floor measured in the same run.

1. Fleet events accepted per second over HTTP: keep-alive connections posting batches of 100
   events to ``POST /v1/events`` of a real ``chatbridge run`` process (console provider, SQLite
   ledger, the notifier running), against the same aiohttp server answering 202 with no work.
2. Latency from ``POST /v1/messages`` to the console provider's send (the transcript's ``at``),
   at low load (one message at a time, 20 a second), p50 and p99. Its floor is the floor
   server's request-to-202 latency when the handler first commits one bare row to a SQLite file
   at ``synchronous=FULL`` in WAL (ADR 0188): a message must be recorded durably before it is
   sent, and the ledger's own floors commit at ``FULL`` too. The same server's bare
   request-to-202 is reported beside it, without a target. 600 messages each (30 s at 20/s):
   the p99 of 200 was their second slowest, which one fsync stall or one descheduling of
   either process moved by 2x between runs; of 600 it is the seventh slowest.
3. Beside them, not a target: the p99 of an ``fdatasync`` of 12 KiB in the ledger's folder at the
   same rate, as many times as messages: the disk's share of both (ADR 0154).

Run: ``python bench/bench_gateway.py [--seconds 5] [--messages 600]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
from _figures import Figure, print_table

FLOOR_SERVER = """
import sqlite3
import sys
from aiohttp import web

# The durable floor: one bare row committed at FULL (WAL) before the 202, on the loop itself,
# as the least a server that records before it answers can do (ADR 0188).
conn = sqlite3.connect(sys.argv[2], isolation_level=None)
conn.execute("PRAGMA journal_mode = WAL")
conn.execute("PRAGMA synchronous = FULL")
conn.execute("CREATE TABLE IF NOT EXISTS floor (id INTEGER PRIMARY KEY, body BLOB NOT NULL)")

async def accept(request):
    await request.read()
    return web.json_response({"accepted": 0}, status=202)

async def accept_durably(request):
    body = await request.read()
    conn.execute("INSERT INTO floor (body) VALUES (?)", (body,))
    return web.json_response({"accepted": 1}, status=202)

app = web.Application(client_max_size=1 << 20)
app.router.add_post("/v1/events", accept)
app.router.add_post("/v1/messages", accept)
app.router.add_post("/v1/durable", accept_durably)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), access_log=None, print=None)
"""

CONFIG = """
[profiles.con]
provider = "console"
settings = {{ transcript = "{transcript}", output = "none", budget = "unlimited" }}

[channels.ops]
profile = "con"
channel_id = "ops"

[stores]
ledger = "{ledger}"

[api]
port = 0
"""


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(path: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {path}")
        time.sleep(0.02)


async def wait_http(url: str) -> None:
    async with aiohttp.ClientSession() as session:
        for _ in range(500):
            try:
                async with session.post(url + "/v1/events", json=[]) as response:
                    await response.read()
                    return
            except aiohttp.ClientError:
                await asyncio.sleep(0.02)
    raise SystemExit(f"{url} never answered")


def batch(offset: int) -> list[dict[str, object]]:
    events: list[dict[str, object]] = []
    for k in range(100):
        agent = f"a{(offset + k) % 1000}"
        events.append({"kind": "StatusChanged", "agent": agent, "status": f"step {offset + k}"})
    return events


async def throughput(url: str, seconds: float, connections: int = 4) -> float:
    payloads = [json.dumps(batch(i * 100)).encode() for i in range(50)]
    headers = {"Content-Type": "application/json"}
    counts = [0] * connections
    deadline = time.perf_counter() + seconds
    connector = aiohttp.TCPConnector(limit=connections)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker(index: int) -> None:
            n = 0
            while time.perf_counter() < deadline:
                body = payloads[n % len(payloads)]
                async with session.post(url + "/v1/events", data=body, headers=headers) as r:
                    if r.status != 202:
                        raise SystemExit(f"unexpected {r.status}: {await r.text()}")
                    await r.read()
                n += 1
                counts[index] += 100

        started = time.perf_counter()
        await asyncio.gather(*(worker(i) for i in range(connections)))
        elapsed = time.perf_counter() - started
    return sum(counts) / elapsed


async def floor_latency(
    url: str, messages: int, rate: float, *, route: str = "/v1/messages"
) -> list[float]:
    """Request-to-202 of the floor server, one at a time at ``rate``; ``route="/v1/durable"``
    commits a row at ``FULL`` before each answer."""
    out = []
    async with aiohttp.ClientSession() as session:
        for i in range(messages):
            began = time.perf_counter()
            async with session.post(url + route, json={"text": f"m{i}"}) as r:
                await r.read()
            out.append(time.perf_counter() - began)
            await asyncio.sleep(max(0.0, 1 / rate - out[-1]))
    return out


async def gateway_latency(
    url: str, transcript: Path, messages: int, rate: float, *, first: int = 0
) -> list[float]:
    """``POST /v1/messages`` to the console's send, one at a time at ``rate``; the probes are
    numbered from ``first``, so rounds of one run never share a text."""
    sent: dict[str, float] = {}
    async with aiohttp.ClientSession() as session:
        for i in range(first, first + messages):
            text = f"latency probe {i}"
            sent[text] = time.time()
            began = time.perf_counter()
            async with session.post(
                url + "/v1/messages", json={"channel": "ops", "text": text}
            ) as r:
                if r.status != 202:
                    raise SystemExit(f"unexpected {r.status}: {await r.text()}")
                await r.read()
            await asyncio.sleep(max(0.0, 1 / rate - (time.perf_counter() - began)))
    deadline = time.monotonic() + 30
    posted: dict[str, float] = {}
    while len(posted) < messages and time.monotonic() < deadline:
        posted = {}
        text = await asyncio.to_thread(transcript.read_text)
        for line in text.splitlines():
            entry = json.loads(line)
            if entry["op"] == "post" and entry["text"] in sent:
                posted[entry["text"]] = entry["at"]
        await asyncio.sleep(0.1)
    return [posted[text] - at for text, at in sent.items() if text in posted]


def disk_sync_latency(folder: Path, samples: int, rate: float) -> list[float]:
    """``fdatasync`` of three pages rewritten in place (as a record's commit appends its frames
    to a reused WAL), ``samples`` times at ``rate`` a second: what the disk alone adds."""
    path = folder / "sync-probe"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        block = b"\x5a" * 12288
        os.write(fd, block)
        os.fsync(fd)  # allocated before the clock starts: later writes change no metadata
        out = []
        for _ in range(samples):
            os.pwrite(fd, block, 0)
            began = time.perf_counter()
            os.fdatasync(fd)
            out.append(time.perf_counter() - began)
            time.sleep(max(0.0, 1 / rate - out[-1]))
        return out
    finally:
        os.close(fd)
        path.unlink()


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--messages", type=int, default=600)
    parser.add_argument("--rate", type=float, default=20.0)
    args = parser.parse_args()
    print_table(measure(args))


def figures(*, quick: bool = False) -> list[Figure]:
    """This module's figures (``bench/_figures.py``); ``quick``: 1 s and 50 messages."""
    seconds, messages = (1.0, 30) if quick else (5.0, 600)
    return measure(argparse.Namespace(seconds=seconds, messages=messages, rate=20.0))


def measure(args: argparse.Namespace) -> list[Figure]:
    workdir = Path(tempfile.mkdtemp(prefix="bench-gateway-"))
    env = {**os.environ, "CHATBRIDGE_LOAD_PLUGINS": ""}

    port = free_port()
    floor = subprocess.Popen(
        [sys.executable, "-c", FLOOR_SERVER, str(port), str(workdir / "floor.sqlite3")], env=env
    )
    floor_url = f"http://127.0.0.1:{port}"
    transcript = workdir / "transcript.jsonl"
    config = workdir / "bridge.toml"
    config.write_text(CONFIG.format(transcript=transcript, ledger=workdir / "bridge.sqlite3"))
    ready = workdir / "ready.json"
    gateway = subprocess.Popen(
        [sys.executable, "-c", "from bridge_core.cli import main; main()", "run", "-c",
         str(config), "--ready-file", str(ready), "--log-level", "WARNING"],
        env=env,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        asyncio.run(wait_http(floor_url))
        wait_for(ready)
        gateway_url = json.loads(ready.read_text())["url"]

        # Alternating one-second rounds, the best of each kept: a change of the machine's load
        # during the run then moves both figures alike (the ratio is what is compared).
        floor_rate = gateway_rate = 0.0
        for _ in range(max(1, round(args.seconds))):
            floor_rate = max(floor_rate, asyncio.run(throughput(floor_url, 1.0)))
            gateway_rate = max(gateway_rate, asyncio.run(throughput(gateway_url, 1.0)))
        # The three latency runs in alternating rounds of 100, as the rates above: a disk whose
        # flushes slow down for a while then slows the floor's and the gateway's alike.
        bare_lat: list[float] = []
        floor_lat: list[float] = []
        gateway_lat: list[float] = []
        rounds = max(1, args.messages // 100)
        for k in range(rounds):
            first = k * (args.messages // rounds) + min(k, args.messages % rounds)
            each = args.messages // rounds + (1 if k < args.messages % rounds else 0)
            bare_lat += asyncio.run(floor_latency(floor_url, each, args.rate))
            floor_lat += asyncio.run(floor_latency(floor_url, each, args.rate, route="/v1/durable"))
            gateway_lat += asyncio.run(
                gateway_latency(gateway_url, transcript, each, args.rate, first=first)
            )
        sync_lat = disk_sync_latency(workdir, args.messages, args.rate)
    finally:
        for process in (floor, gateway):
            process.send_signal(signal.SIGTERM)
        for process in (floor, gateway):
            process.wait(30)

    ms = 1000.0
    print(
        f"fleet events accepted over HTTP (batches of 100, 4 keep-alive connections, "
        f"{args.seconds:.0f} s each):"
    )
    print(f"  gateway {gateway_rate:12,.0f} events/s")
    print(f"  floor   {floor_rate:12,.0f} events/s  (aiohttp answering 202, no work)")
    print(f"  ratio   {gateway_rate / floor_rate:12.2f} of the floor")
    found = [
        Figure(
            name="gateway.events_http",
            value=gateway_rate,
            unit="events/s",
            floor=floor_rate,
            target=0.8,
            label="fleet events over HTTP, batches of 100 (floor: bare aiohttp 202)",
        )
    ]
    print(
        f"POST /v1/messages -> console send, {len(gateway_lat)} of {args.messages} messages at "
        f"{args.rate:g}/s:"
    )
    for q, label in ((0.5, "p50"), (0.99, "p99")):
        g, f, b = (pct(lat, q) * ms for lat in (gateway_lat, floor_lat, bare_lat))
        print(
            f"  {label}: gateway {g:7.2f} ms, floor (request -> commit at FULL -> 202) "
            f"{f:6.2f} ms, ratio {g / f:5.2f}x; bare request -> 202 {b:6.2f} ms ({g / b:.2f}x)"
        )
        found.append(
            Figure(
                name=f"gateway.message_send_{label}",
                value=g,
                unit="ms",
                floor=f,
                target=2.0 if label == "p99" else None,
                higher_is_better=False,
                label=f"POST /v1/messages -> send, {label}, {args.rate:g}/s "
                "(floor: one row committed at FULL -> 202)",
            )
        )

    def p99_beside(
        name: str, what: str, note: str, values: list[float], floor: list[float]
    ) -> Figure:
        """A p99 without a target, against the p99 of ``floor`` (``note`` says which)."""
        return Figure(
            name=name,
            value=pct(values, 0.99) * ms,
            unit="ms",
            floor=pct(floor, 0.99) * ms,
            higher_is_better=False,
            label=f"{what}, p99, {args.rate:g}/s ({note})",
        )

    found.append(
        p99_beside(
            "gateway.message_send_p99_bare_floor",
            "POST /v1/messages -> send",
            "floor: bare -> 202, no flush; no target, the floor before ADR 0188",
            gateway_lat,
            bare_lat,
        )
    )
    print(f"  mean gateway {statistics.fmean(gateway_lat) * ms:.2f} ms")
    print(
        f"  the disk alone, fdatasync of 12 KiB at {args.rate:g}/s: p50 "
        f"{pct(sync_lat, 0.5) * ms:.2f} ms, p99 {pct(sync_lat, 0.99) * ms:.2f} ms "
        f"(one such flush is in every message's path and in the floor's)"
    )
    found.append(
        p99_beside(
            "gateway.message_disk_sync_p99",
            "fdatasync of 12 KiB beside the ledger",
            "floor: the message floor; no target: the disk's share of the message p99",
            sync_lat,
            floor_lat,
        )
    )
    return found


if __name__ == "__main__":
    main()
