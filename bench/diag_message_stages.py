"""Where the time of ``POST /v1/messages`` -> send goes, message by message (ADR 0173).

A diagnostic, not a benchmark: no figure, floor or target. It runs the gateway as
``bench_gateway.py`` does (the same config, 5 s of fleet events first, then the floor's and the
gateway's latency runs at 20 messages a second), with timestamps written from inside the
gateway process at each stage of a message, on the wall clock the client shares:

    sent       the client sends the request
    recv       the route's handler starts (aiohttp has read and routed the request)
    accept     ``accept_message`` starts (the body parsed and checked)
    handover   the record goes to the writer's queue (end of the loop iteration)
    w_got      the writer thread's ``get`` returned (it was woken and holds the GIL)
    w_begin    the writer's batch begins
    commit     the batch's ``COMMIT`` begins (``BEGIN IMMEDIATE`` and the ``INSERT`` done)
    w_end      the batch ended: ``COMMIT`` (its fsync) returned and the loop's wake-up queued
               (or the loop's wake-up, when that ran first)
    wake       the loop runs the batch's wake-up
    post       the console provider's ``post`` (the transcript's ``at``)

plus the collector's collections and every event-loop callback over 0.8 ms. It prints each
stage's p50/p90/p99/max, and for the slowest 5% of messages how much each stage exceeded its
own median (where the tail is made).

The gateway runs its ledger's writer thread (``--ledger-writer thread``): the stages from
``handover`` to ``w_end`` are the thread's, and a writer process (the default, ADR 0187) has
none of them in this process.

Run: ``python bench/diag_message_stages.py [--messages 600]``. The hooks wrap private functions
of ``bridge_core`` in the gateway process only (``install``); they cost a few microseconds a
stage, so the run's own figures sit slightly above ``bench_gateway.py``'s.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import gc
import itertools
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import bench_gateway as bg

STAGES = ("sent", "recv", "accept", "handover", "w_got", "w_begin", "commit", "w_end", "wake")
SLOW_CALLBACK = 0.0008  # seconds: an event-loop callback longer than this is listed


def install(out: str) -> None:
    """In the gateway process: wrap the message path's stages to timestamp them, and write
    what was seen to ``out`` when the process exits (``serve`` leaves through ``os._exit``)."""
    from bridge_core.ledger import sqlwriter
    from bridge_core.providers import console
    from bridge_core.runtime import api_backend, http_api

    seen: list[list[Any]] = []
    add = seen.append
    now = time.time

    def around(cls: Any, name: str, stage: str) -> None:
        original = getattr(cls, name)

        async def wrapped(*args: Any, **kwargs: Any) -> Any:
            add([stage, now()])
            return await original(*args, **kwargs)

        setattr(cls, name, wrapped)

    around(http_api._Routes, "post_messages", "recv")
    around(api_backend.GatewayApi, "accept_message", "accept")
    around(console.ConsoleProvider, "post", "post")

    writer = sqlwriter.SQLiteWriter
    hand_over = writer._hand_over
    run_batch = writer._run_batch
    signal_committing = sqlwriter._signal_committing
    wake = sqlwriter._wake
    init = writer.__init__

    class Watched:  # the writer's queue, its ``get`` timestamped in the writer thread
        def __init__(self, inner: Any) -> None:
            self.inner = inner
            self.get_nowait, self.put, self.empty = inner.get_nowait, inner.put, inner.empty

        def get(self) -> Any:
            item = self.inner.get()
            add(["w_got", now()])
            return item

    def init_watched(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        self._queue = Watched(self._queue)

    def hand_over_watched(self: Any, loop: Any) -> None:
        add(["handover", now()])
        hand_over(self, loop)

    def run_batch_watched(self: Any, conn: Any, batch: Any) -> None:
        record = any(call.committing is not None for call in batch)  # a record in flight
        add(["w_begin" if record else "other_begin", now()])
        try:
            run_batch(self, conn, batch)
        finally:
            add(["w_end" if record else "other_end", now()])

    def committing_watched(batch: Any) -> None:
        add(["commit", now()])
        signal_committing(batch)

    def wake_watched(calls: Any) -> None:
        add(["wake", now()])
        wake(calls)

    writer.__init__ = init_watched  # type: ignore[method-assign]
    writer._hand_over = hand_over_watched  # type: ignore[method-assign]
    writer._run_batch = run_batch_watched  # type: ignore[method-assign]
    sqlwriter._signal_committing = committing_watched
    sqlwriter._wake = wake_watched

    handle_run = asyncio.events.Handle._run
    clock = time.perf_counter

    def run_timed(self: asyncio.Handle) -> None:
        began = clock()
        handle_run(self)
        took = clock() - began
        if took > SLOW_CALLBACK:
            add(["slow_callback", now() - took, took, repr(self._callback)[:100]])  # type: ignore[attr-defined]

    asyncio.events.Handle._run = run_timed  # type: ignore[method-assign]
    gc.callbacks.append(lambda phase, info: add([f"gc_{phase}", now(), info["generation"]]))

    leave: Callable[[int], Any] = os._exit

    def dump_then_exit(code: int) -> None:
        Path(out).write_text(json.dumps(seen))
        leave(code)

    os._exit = dump_then_exit  # type: ignore[assignment]


async def latency(url: str, transcript: Path, messages: int, rate: float) -> list[list[Any]]:
    """As ``bench_gateway.gateway_latency``; returns ``[sent, posted]`` per message."""
    sent: dict[str, float] = {}
    async with aiohttp.ClientSession() as session:
        for i in range(messages):
            text = f"latency probe {i}"
            sent[text] = time.time()
            began = time.perf_counter()
            body = {"channel": "ops", "text": text}
            async with session.post(url + "/v1/messages", json=body) as r:
                await r.read()
            await asyncio.sleep(max(0.0, 1 / rate - (time.perf_counter() - began)))
    await asyncio.sleep(0.5)
    posted = {}
    for line in (await asyncio.to_thread(transcript.read_text)).splitlines():
        entry = json.loads(line)
        if entry["op"] == "post":
            posted[entry["text"]] = entry["at"]
    return [[at, posted[text]] for text, at in sent.items() if text in posted]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def report(messages: list[list[Any]], seen: list[list[Any]], floor: list[float]) -> None:
    seen.sort(key=lambda event: event[1])
    times = [event[1] for event in seen]
    rows: list[dict[str, float]] = []
    for sent, posted in messages:
        stamps = {"sent": sent, "post": posted}
        for event in seen[bisect.bisect_left(times, sent) : bisect.bisect_right(times, posted)]:
            stamps.setdefault(event[0], event[1])
        if "wake" in stamps:
            # The batch's end is stamped after it queued the loop's wake-up; when the writer
            # loses the GIL there, the loop may wake and post first: the commit ended by then.
            stamps["w_end"] = min(stamps.get("w_end", stamps["wake"]), stamps["wake"])
        if all(stage in stamps for stage in STAGES):
            rows.append(stamps)
    chain = (*STAGES, "post")
    pairs = list(itertools.pairwise(chain))
    gaps = [f"{a}->{b}" for a, b in pairs]
    per = [{f"{a}->{b}": row[b] - row[a] for a, b in pairs} for row in rows]
    total = [row["post"] - row["sent"] for row in rows]
    ms = 1000.0
    print(
        f"{len(rows)} of {len(messages)} messages with every stage seen (a record that took "
        f"the record-then-deliver path has no commit hint), load {os.getloadavg()[0]:.2f}:\n"
        f"  sent -> post p50 "
        f"{pct(total, 0.5) * ms:.2f} ms, p99 {pct(total, 0.99) * ms:.2f} ms; the floor's "
        f"request -> 202 p50 {pct(floor, 0.5) * ms:.2f} ms, p99 {pct(floor, 0.99) * ms:.2f} ms"
    )
    print(f"  {'stage':22s} {'p50':>7s} {'p90':>7s} {'p99':>7s} {'max':>7s}  ms")
    median = {}
    for gap in gaps:
        values = [one[gap] for one in per]
        median[gap] = pct(values, 0.5)
        print(
            f"  {gap:22s} {median[gap] * ms:7.3f} {pct(values, 0.9) * ms:7.3f} "
            f"{pct(values, 0.99) * ms:7.3f} {max(values) * ms:7.3f}"
        )
    cut = pct(total, 0.95)
    tail = [one for one, t in zip(per, total, strict=True) if t >= cut]
    excess = {gap: sum(max(0.0, one[gap] - median[gap]) for one in tail) for gap in gaps}
    whole = sum(excess.values()) or 1.0
    print(f"  the slowest 5% ({len(tail)}): each stage's excess over its median, mean a message")
    for gap, value in sorted(excess.items(), key=lambda kv: -kv[1]):
        print(f"    {gap:22s} {value / len(tail) * ms:6.2f} ms  {value / whole:6.1%}")
    first, last = rows[0]["sent"], rows[-1]["post"]
    during = [event for event in seen if first <= event[1] <= last]
    collections = [event[2] for event in during if event[0] == "gc_start"]
    slow = sorted(event[2] for event in during if event[0] == "slow_callback")
    print(
        f"  during the run: {len(collections)} collections (generations "
        f"{sorted(set(collections))}), {len(slow)} loop callbacks over "
        f"{SLOW_CALLBACK * ms:g} ms (longest {max(slow, default=0) * ms:.2f} ms)"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=600)
    parser.add_argument("--rate", type=float, default=20.0)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="diag-messages-"))
    seen_file = workdir / "stages.json"
    env = {**os.environ, "CHATBRIDGE_LOAD_PLUGINS": ""}
    port = bg.free_port()
    floor = subprocess.Popen(
        [sys.executable, "-c", bg.FLOOR_SERVER, str(port), str(workdir / "floor.sqlite3")],
        env=env,
    )
    floor_url = f"http://127.0.0.1:{port}"
    transcript = workdir / "transcript.jsonl"
    config = workdir / "bridge.toml"
    config.write_text(bg.CONFIG.format(transcript=transcript, ledger=workdir / "bridge.sqlite3"))
    ready = workdir / "ready.json"
    start = (
        f"import diag_message_stages as d; d.install({str(seen_file)!r}); "
        "from bridge_core.cli import main; main()"
    )
    gateway = subprocess.Popen(
        [sys.executable, "-c", start, "run", "-c", str(config), "--ready-file", str(ready),
         "--log-level", "WARNING", "--ledger-writer", "thread"],
        env={**env, "PYTHONPATH": str(Path(__file__).parent)},
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        asyncio.run(bg.wait_http(floor_url))
        bg.wait_for(ready)
        url = json.loads(ready.read_text())["url"]
        for _ in range(5):  # as bench_gateway.py: the gateway has served events before
            asyncio.run(bg.throughput(floor_url, 1.0))
            asyncio.run(bg.throughput(url, 1.0))
        floor_lat = asyncio.run(bg.floor_latency(floor_url, args.messages, args.rate))
        messages = asyncio.run(latency(url, transcript, args.messages, args.rate))
    finally:
        for process in (floor, gateway):
            process.send_signal(signal.SIGTERM)
        for process in (floor, gateway):
            process.wait(30)
    report(messages, json.loads(seen_file.read_text()), floor_lat)


if __name__ == "__main__":
    main()
