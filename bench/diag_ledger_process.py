"""Would a writer *process* lift the SQLite ledger's ceiling (ADR 0179, 0186)?

A diagnostic, not a benchmark, and not a design: no figure or target of its own, and nothing
here is used by the ledger. ADR 0179 found that the event loop and the writer thread take
turns (their CPU adds up to the wall time) because the writer needs the GIL between its
statements, and computed what perfect overlap would give. This measures it: the real
``DeliveryLedger`` over the real ``SQLiteLedgerStore``, with the store's ``writer`` replaced by
a stand-in that runs the same merged statements (``sqlmerged``, the same group commits, FULL or
NORMAL as the real writer chooses) in a child process, which has a GIL of its own. Calls go
down a pipe, pickled, in frames; the child takes every frame waiting when it starts a
transaction, so commits group as the thread's do.

Two ways of handing calls over are measured: at the end of the loop's iteration (as the
thread writer does), and also every ``--chunk`` calls, so that the child starts on the first
calls of a wave while the loop makes the rest (ADR 0179 tried that with the thread: the GIL
made it no better).

For each, ``submit`` and at the turn: replies/s, the loop's and the child's CPU a reply, the
group commit's size, and the ratio against the benchmark's floor at the batching the run had
(``bench_ledger``'s floors, as the benchmark takes them). The thread writer is measured in the
same run. Linux only (``/proc``, ``F_SETPIPE_SZ``).

Run: ``python bench/diag_ledger_process.py [--replies 40000] [--chunk 64]``.
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import os
import pickle
import sqlite3
import struct
import subprocess
import sys
import tempfile
import threading
from contextlib import closing
from pathlib import Path
from typing import Any

import anyio
from bench_ledger import sqlite_floor, sqlite_floor_merged, submit_rate
from diag_ledger_ceiling import IN_FLIGHT, thread_cpu

from bridge_core.ledger import open_store
from bridge_core.ledger.sqlite import SQLiteLedgerStore

_HEADER = struct.Struct("<I")
_PIPE_SIZE = 1 << 20  # a frame never waits for the reader's room (pipe-max-size's default)

CHILD = r"""
import os, pickle, sqlite3, struct, sys
from bridge_core.ledger.sqlite import configure_connection
from bridge_core.ledger.sqlmerged import MergedClaims, MergedHeldUpdates, MergedRecords

path, owner = sys.argv[1], sys.argv[2]
conn = sqlite3.connect(path, isolation_level=None)
configure_connection(conn)
conn.create_function("owner_alive", 1, lambda owner: False)  # no other owner in this run
kinds = {
    "records": MergedRecords(owner),
    "claims": MergedClaims(owner, lambda: None, lambda: "[]"),
    "held": MergedHeldUpdates(owner),
}
header = struct.Struct("<I")
level = "FULL"
pending = bytearray()
while True:
    chunk = os.read(0, 1 << 20)
    if not chunk:
        break
    pending += chunk
    frames = []
    while len(pending) >= 4:
        (size,) = header.unpack_from(pending)
        if len(pending) < 4 + size:
            break
        frames.append(pickle.loads(pending[4 : 4 + size]))
        del pending[: 4 + size]
    if not frames:
        continue
    calls = [call for frame in frames for call in frame]  # (kind, durable, item)
    wanted = "FULL" if any(durable for _, durable, _ in calls) else "NORMAL"
    if wanted != level:
        conn.execute(f"PRAGMA synchronous = {wanted}")
        level = wanted
    groups = {}
    for at, (kind, _, item) in enumerate(calls):
        groups.setdefault(kind, []).append((at, item))
    results = [None] * len(calls)
    conn.execute("BEGIN IMMEDIATE")
    for kind, indexed in groups.items():
        found = kinds[kind].run_many(conn, [item for _, item in indexed])
        for (at, item), result in zip(indexed, found):
            # a new row comes back as sent: only say so, and the parent uses its own copy
            results[at] = True if kind == "records" and result[1] and result[0] is item else result
    conn.execute("COMMIT")
    body = pickle.dumps((len(calls), results), protocol=5)
    os.write(1, header.pack(len(body)) + body)
"""


class ProcessWriter:
    """The part of ``SQLiteWriter`` that ``submit`` uses (``call_merged``), over a child."""

    def __init__(
        self, path: str, owner: str, names: dict[int, str], *, records: Any, chunk: int
    ) -> None:
        self.batches = self.calls = 0
        self._records = records
        self._names = names
        self._chunk = chunk
        self.child = subprocess.Popen(
            [sys.executable, "-c", CHILD, path, owner],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert self.child.stdin is not None and self.child.stdout is not None
        self._out = self.child.stdin.fileno()
        self._in = self.child.stdout.fileno()
        for fd in (self._out, self._in):
            fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, _PIPE_SIZE)
        os.set_blocking(self._in, False)
        self._gathering: list[tuple[str, bool, Any]] = []
        self._gathered_futures: list[tuple[asyncio.Future[Any], Any]] = []
        self._answered: list[tuple[asyncio.Future[Any], Any]] = []  # calls in flight, in order
        self._received = bytearray()
        self._scheduled = False
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self._in, self._readable)

    async def call_merged(self, kind: Any, item: Any, *, durable: bool = True) -> Any:
        future = self._loop.create_future()
        self._gathering.append((self._names[id(kind)], durable, item))
        self._gathered_futures.append((future, item if kind is self._records else None))
        if len(self._gathering) >= self._chunk:
            self._hand_over()
        elif not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._hand_over)
        return await future

    def _hand_over(self) -> None:
        self._scheduled = False
        if not self._gathering:
            return
        body = pickle.dumps(self._gathering, protocol=5)
        os.write(self._out, _HEADER.pack(len(body)) + body)  # fits the pipe: never waits
        self._answered += self._gathered_futures
        self._gathering, self._gathered_futures = [], []

    def _readable(self) -> None:
        try:
            self._received += os.read(self._in, _PIPE_SIZE)
        except BlockingIOError:
            return
        while len(self._received) >= 4:
            (size,) = _HEADER.unpack_from(self._received)
            if len(self._received) < 4 + size:
                return
            count, results = pickle.loads(self._received[4 : 4 + size])
            del self._received[: 4 + size]
            self.batches += 1
            self.calls += count
            futures, self._answered = self._answered[:count], self._answered[count:]
            for (future, item), result in zip(futures, results, strict=True):
                if future.done():
                    continue
                new = result is True and item is not None  # a record's "as sent"
                future.set_result((item, True) if new else result)

    def close(self) -> None:
        self._loop.remove_reader(self._in)
        assert self.child.stdin is not None and self.child.stdout is not None
        self.child.stdin.close()  # the child's read ends: it closes its connection and exits
        self.child.wait(10)
        self.child.stdout.close()


def process_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def one_run(
    folder: Path, *, replies: int, begins: bool, chunk: int | None
) -> dict[str, float]:
    """``submit_rate`` on a fresh store: over its thread writer (``chunk`` None) or a child."""
    path = folder / f"{'turn' if begins else 'submit'}-{chunk}.db"
    store = await open_store(path)
    assert isinstance(store, SQLiteLedgerStore)
    original = store.writer
    writer: Any = original
    process: ProcessWriter | None = None
    if chunk is not None:
        names = {id(store._records): "records", id(store._claims): "claims"}
        names[id(store._held)] = "held"
        process = ProcessWriter(
            store.writer.path, store._owner, names, records=store._records, chunk=chunk
        )
        store.writer = writer = process  # type: ignore[assignment]
    await submit_rate(store, replies=2000, in_flight=IN_FLIGHT, tag="warm", begins=begins)
    writer.batches = writer.calls = 0
    loop_thread = threading.get_native_id()
    other = (
        (lambda: process_cpu(process.child.pid))
        if process is not None
        else (lambda: thread_cpu(store.writer._thread.native_id or 0))
    )
    before = (thread_cpu(loop_thread), other())
    rate = await submit_rate(store, replies=replies, in_flight=IN_FLIGHT, tag="r", begins=begins)
    loop_cpu = thread_cpu(loop_thread) - before[0]
    writer_cpu = other() - before[1]
    per_commit = writer.calls / max(1, writer.batches)
    if process is not None:
        process.close()
        store.writer = original
    await store.aclose()
    with closing(sqlite3.connect(path)) as conn:  # what the writer, thread or child, left
        found = conn.execute("SELECT count(*) FROM ledger WHERE state = 'delivered'")
        (delivered,) = found.fetchone()
    return {
        "delivered": delivered,
        "rate": rate,
        "loop_us": loop_cpu / replies * 1e6,
        "writer_us": writer_cpu / replies * 1e6,
        "per_commit": per_commit,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replies", type=int, default=40_000)
    parser.add_argument("--chunk", type=int, default=64)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} CPUs, {args.replies:,} replies")
    ways = {
        "thread writer (as now)": None,
        "child process, handed over at the iteration's end": 1 << 30,
        f"child process, also every {args.chunk} calls": args.chunk,
    }
    for begins, label, target in ((False, "submit", 0.6), (True, "at the turn", 0.8)):
        print(f"\n{label} (target {target})")
        for way, chunk in ways.items():
            with tempfile.TemporaryDirectory() as here:
                found = await one_run(Path(here), replies=args.replies, begins=begins, chunk=chunk)
                per = max(1, round(found["per_commit"]))  # calls a commit, as the bench's
                floor = (
                    sqlite_floor(Path(here) / "floor.db", replies=args.replies, per_commit=per)
                    if begins
                    else sqlite_floor_merged(
                        Path(here) / "floor.db", replies=args.replies, per_commit=per
                    )
                )
            print(
                f"  {way}: {found['rate']:9,.0f} replies/s, floor {floor:9,.0f}, ratio "
                f"{found['rate'] / floor:.3f}; CPU a reply: loop {found['loop_us']:.1f} us, "
                f"writer {found['writer_us']:.1f} us; {found['per_commit']:.0f} calls a commit"
            )


if __name__ == "__main__":
    anyio.run(main)
