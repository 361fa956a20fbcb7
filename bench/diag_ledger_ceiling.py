"""How far the SQLite ledger's ``submit`` and claimed-at-the-turn figures can go (ADR 0179).

A diagnostic, not a benchmark: no figure or target of its own. It runs ``bench_ledger``'s
``submit_rate`` (the same replies, 512 in flight, a no-op platform) and reads the CPU time of
each thread from ``/proc`` around the run, then the bench's floor at the same batching, and a
bare asyncio loop of tasks awaiting futures that a second thread completes in batches (the cost
of the event loop's own machinery a round trip to the writer, with no ledger in it).

From those it prints, for each figure:

- the loop's and the writer's CPU a reply, and their sum against the wall time: when the sum
  is the wall time, the two threads take turns (each wave of replies waits for its batch's
  commit, then the writer waits for the next wave) rather than overlapping;
- the ceiling with perfect overlap: the writer never holding the GIL and never making the loop
  wait, the rate is at most one reply per the loop's CPU a reply, and the ratio at most that
  over the floor;
- the loop's CPU a reply the target would need under that perfect overlap.

Run: ``python bench/diag_ledger_ceiling.py [--replies 40000]``. Linux only (``/proc``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import queue
import tempfile
import threading
import time
from pathlib import Path

import anyio
from bench_ledger import sqlite_floor, sqlite_floor_merged, submit_rate

from bridge_core.ledger import open_store
from bridge_core.ledger.sqlite import SQLiteLedgerStore

IN_FLIGHT = 512
TARGETS = {"submit": 0.6, "at the turn": 0.8}


def thread_cpu(native_id: int) -> float:
    """Seconds of CPU (user and system) the thread ``native_id`` of this process has used."""
    with open(f"/proc/self/task/{native_id}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def measured_run(
    store: SQLiteLedgerStore, *, replies: int, begins: bool, tag: str
) -> dict[str, float]:
    """One ``submit_rate`` run: its rate, wall time, each thread's CPU a reply, the batching."""
    writer_thread = store.writer._thread.native_id
    assert writer_thread is not None
    loop_thread = threading.get_native_id()
    store.writer.batches = store.writer.calls = 0
    cpu_before = (thread_cpu(loop_thread), thread_cpu(writer_thread))
    started = time.perf_counter()
    rate = await submit_rate(store, replies=replies, in_flight=IN_FLIGHT, tag=tag, begins=begins)
    wall = time.perf_counter() - started
    loop_cpu = thread_cpu(loop_thread) - cpu_before[0]
    writer_cpu = thread_cpu(writer_thread) - cpu_before[1]
    return {
        "rate": rate,
        "wall_us": wall / replies * 1e6,
        "loop_us": loop_cpu / replies * 1e6,
        "writer_us": writer_cpu / replies * 1e6,
        "per_commit": store.writer.calls / max(1, store.writer.batches),
    }


def bare_round_trips(awaits: int, *, replies: int = 100_000) -> float:
    """Microseconds a reply for ``IN_FLIGHT`` tasks that each await ``awaits`` futures a reply,
    handed to a second thread at the end of each loop iteration and completed by it in
    batches, one wake-up of the loop a batch: the writer's protocol with nothing in it."""
    handed: queue.SimpleQueue[list[asyncio.Future[None]] | None] = queue.SimpleQueue()

    def completer() -> None:
        while (batch := handed.get()) is not None:
            while True:
                try:
                    more = handed.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    handed.put(None)
                    break
                batch += more
            batch[0].get_loop().call_soon_threadsafe(_complete, batch)

    gathering: list[asyncio.Future[None]] = []

    def hand_over() -> None:
        handed.put(gathering[:])
        gathering.clear()

    async def round_trip(loop: asyncio.AbstractEventLoop) -> None:
        future = loop.create_future()
        if not gathering:
            loop.call_soon(hand_over)
        gathering.append(future)
        await future

    async def run() -> float:
        loop = asyncio.get_running_loop()
        todo = iter(range(replies))

        async def worker() -> None:
            for _ in todo:
                for _ in range(awaits):
                    await round_trip(loop)

        thread = threading.Thread(target=completer, daemon=True)
        thread.start()
        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(IN_FLIGHT)))
        elapsed = time.perf_counter() - started
        handed.put(None)
        thread.join()
        return elapsed / replies * 1e6

    return asyncio.run(run())


def _complete(batch: list[asyncio.Future[None]]) -> None:
    for future in batch:
        if not future.done():
            future.set_result(None)


async def ledger_runs(replies: int) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """Each figure's measured run and its floor at that run's batching."""
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        store = await open_store(folder / "ledger.db", sqlite_writer="thread")
        assert isinstance(store, SQLiteLedgerStore)
        await submit_rate(store, replies=2000, in_flight=IN_FLIGHT, tag="warm")
        runs = {
            "submit": await measured_run(store, replies=replies, begins=False, tag="s"),
            "at the turn": await measured_run(store, replies=replies, begins=True, tag="t"),
        }
        await store.aclose()
        floors = {
            # the bench's floors, at the batching each run had
            "submit": sqlite_floor_merged(
                folder / "merged.db",
                replies=replies,
                per_commit=round(runs["submit"]["per_commit"]),
            ),
            "at the turn": sqlite_floor(
                folder / "floor.db",
                replies=replies,
                per_commit=round(runs["at the turn"]["per_commit"]),
            ),
        }
    return runs, floors


def report(replies: int) -> None:
    runs, floors = anyio.run(ledger_runs, replies)
    trips = {awaits: bare_round_trips(awaits) for awaits in (1, 2, 3)}
    print(f"load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} CPUs, {replies:,} replies")
    print(
        "the event loop's own cost, tasks awaiting thread-completed futures (no ledger): "
        + ", ".join(f"{awaits} a reply {us:.2f} us" for awaits, us in trips.items())
    )
    for name, run in runs.items():
        floor = floors[name]
        target = TARGETS[name]
        overlap = 1e6 / run["loop_us"]
        print(
            f"\n{name}: {run['rate']:,.0f} replies/s, floor {floor:,.0f}/s, ratio "
            f"{run['rate'] / floor:.3f} (target {target})"
        )
        busy = (run["loop_us"] + run["writer_us"]) / run["wall_us"]
        print(
            f"  a reply: wall {run['wall_us']:.1f} us; CPU: loop {run['loop_us']:.1f} us, "
            f"writer {run['writer_us']:.1f} us (together {busy:.2f} of the wall time); "
            f"{run['per_commit']:.0f} calls a commit"
        )
        print(
            f"  perfect overlap (the writer free of the GIL): at most {overlap:,.0f} replies/s, "
            f"ratio {overlap / floor:.3f}; the target needs the loop at "
            f"{1e6 / (target * floor):.1f} us a reply or less"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--replies", type=int, default=40_000)
    args = parser.parse_args()
    report(args.replies)


if __name__ == "__main__":
    main()
