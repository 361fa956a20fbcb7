"""Delivery ledger throughput: ``python bench/bench_ledger.py [--replies N] [--sweep-rows N]``.

``--only sweep`` (or ``BENCH_LEDGER_ONLY=sweep`` under ``run_all.py``) measures only the boot
sweeps; ``--only submit`` only the rest.

Measured in one run, on SQLite (``synchronous=FULL``) and PostgreSQL (when it answers):

- replies recorded and marked delivered per second through ``DeliveryLedger.submit`` (a row
  recorded already claimed, then settled: two statements a reply, ADR 0121) with many replies
  in flight, a no-op platform; and
  the same with the claim made in ``delivery.begin()`` (``deliver_begins=True``, as the gateway
  runs it on a channel with replies queued: record, claim, settle);
- the floor: a bare loop of the same statements with the same durability and the same
  batching (SQLite: one thread, a commit every as many statements as the ledger's writer put in
  one group commit on average, once as single-row statements and once as the ledger's own
  multi-row statements; PostgreSQL: as many autocommit connections as the store uses);
- a boot sweep over ``--sweep-rows`` rows a dead process left pending.

Each SQLite figure is measured twice: with the hot statements in a writer process
(``…_process``, ADR 0186; the gateway's default since ADR 0187, so these carry the targets),
and on the writer thread (``writer="thread"``, no target), each against floors at its own
batching. Each SQLite figure and floor is the best of ``--rounds`` rounds (``ROUNDS``; one with
``--quick``), every round printed.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Literal

import anyio
from _figures import Figure, best_of_rounds, print_table

from bridge_core.ledger import Delivery, DeliveryLedger, Reply, open_store
from bridge_core.ledger.rows import new_row
from bridge_core.ledger.sqlite import SCHEMA, SQLiteLedgerStore, configure_connection
from bridge_core.ledger.sqlmerged import MergedClaims, MergedHeldUpdates, MergedRecords
from bridge_core.provider import MessageRef

PG_URL = "postgresql://postgres@127.0.0.1:5432/test"


async def _deliver(delivery: Delivery) -> MessageRef:
    await delivery.begin()  # a no-op unless the ledger claims at the turn (deliver_begins)
    return MessageRef(delivery.channel, "1")


def _reply(index: int, tag: str) -> Reply:
    return Reply.answering(
        profile="X",
        platform="console",
        channel="C1",
        answers=f"{tag}{index}",
        text=f"reply number {index}, of a typical short length for a chat answer",
    )


async def submit_rate(
    store: Any, *, replies: int, in_flight: int, tag: str, begins: bool = False
) -> float:
    ledger = DeliveryLedger(store, deliver=_deliver, profiles={"X"}, deliver_begins=begins)
    todo = iter(range(replies))

    async def worker() -> None:  # one of ``in_flight`` repliers
        for index in todo:
            await ledger.submit(_reply(index, tag))

    started = time.perf_counter()
    async with anyio.create_task_group() as group:
        for _ in range(in_flight):
            group.start_soon(worker)
    return replies / (time.perf_counter() - started)


def sqlite_floor(path: Path, *, replies: int, per_commit: int) -> float:
    """The same three statements a reply, one thread, a commit every ``per_commit`` statements."""
    conn = sqlite3.connect(path, isolation_level=None)
    configure_connection(conn)
    conn.executescript(SCHEMA)  # the ledger's own table and indexes
    statements = 0
    started = time.perf_counter()
    conn.execute("BEGIN IMMEDIATE")
    for index in range(replies):
        oid = f"floor{index}"
        now = time.time()
        conn.execute(
            "INSERT INTO ledger (id, profile, platform, channel, thread, reply_to, text, chunks, "
            "state, owner, created_at, updated_at) VALUES (?, 'X', 'console', 'C1', NULL, NULL, "
            "?, '', 'pending', 'me', ?, ?) ON CONFLICT (id) DO NOTHING RETURNING id",
            (oid, "reply text of a typical short length for a chat answer", now, now),
        ).fetchone()
        conn.execute(
            "UPDATE ledger SET state = 'attempting', owner = 'me', fence = fence + 1, "
            "attempts = attempts + 1, updated_at = ? WHERE id = ? AND fence = 0 RETURNING id",
            (now, oid),
        ).fetchone()
        conn.execute(
            "UPDATE ledger SET state = 'delivered', updated_at = ?, delivered = ? "
            "WHERE id = ? AND fence = 1 AND owner = 'me' AND state = 'attempting'",
            (now, '[["C1", "1", null]]', oid),
        )
        statements += 3
        if statements >= per_commit:
            conn.execute("COMMIT")
            conn.execute("BEGIN IMMEDIATE")
            statements = 0
    conn.execute("COMMIT")
    elapsed = time.perf_counter() - started
    conn.close()
    return replies / elapsed


def sqlite_floor_merged(
    path: Path, *, replies: int, per_commit: int, claimed_at_record: bool = True
) -> float:
    """The ledger's own multi-row statements (``sqlmerged``), one thread, no event loop, as
    ``submit`` makes them: a row recorded already claimed, then settled (ADR 0121); without
    ``claimed_at_record``, recorded, claimed and settled (before ADR 0121). Each commit does
    every statement of ``per_commit // (statements a reply)`` replies, so this floor pays no
    more commits than the ledger does."""
    conn = sqlite3.connect(path, isolation_level=None)
    configure_connection(conn)
    conn.executescript(SCHEMA)
    conn.create_function("owner_alive", 1, lambda owner: False)
    records, claims, held = (
        MergedRecords("me"),
        MergedClaims("me", lambda: None),
        MergedHeldUpdates("me"),
    )
    group = max(1, per_commit // (2 if claimed_at_record else 3))
    now = time.time()
    # The rows and the statements' items are built before the clock starts: the floor is the
    # statements' cost, not the cost of making replies.
    work = []
    for first in range(0, replies, group):
        fresh = [
            new_row(_reply(index, "floor"), owner="me", now=now, claimed=claimed_at_record)
            for index in range(first, min(replies, first + group))
        ]
        claim_items = (
            [] if claimed_at_record else [(row.id, 0, now, row.created_at) for row in fresh]
        )
        held_items = [
            (row.id, 1, now, "delivered", None, 0, None, "C1", "1", None, 1, row.created_at)
            for row in fresh
        ]
        work.append((fresh, claim_items, held_items))
    started = time.perf_counter()
    for fresh, claim_items, held_items in work:
        conn.execute("BEGIN IMMEDIATE")
        records.run_many(conn, fresh)
        if claim_items:
            claims.run_many(conn, claim_items)
        held.run_many(conn, held_items)
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - started
    conn.close()
    return replies / elapsed


def seed_sqlite(path: Path, rows: int) -> None:
    """``rows`` pending rows left by a process that no longer runs."""
    conn = sqlite3.connect(path, isolation_level=None)
    configure_connection(conn)
    now = time.time()
    conn.execute("BEGIN")
    conn.executemany(
        "INSERT INTO ledger (id, profile, platform, channel, text, state, owner, created_at, "
        "updated_at) VALUES (?, 'X', 'console', 'C1', 'stored reply', 'pending', "
        "'gone-host|1|0', ?, ?)",
        ((f"sweep{index:07d}", now + index * 1e-6, now) for index in range(rows)),
    )
    conn.execute("COMMIT")
    conn.close()


async def sweep_rate(store: Any) -> tuple[float, int]:
    ledger = DeliveryLedger(store, deliver=_deliver, profiles={"X"})  # the default schedule
    # The seeding's pages (and an earlier figure's) are written back before the clock starts,
    # so the sweep's commits do not wait on the setup's writeback.
    await anyio.to_thread.run_sync(os.sync)
    started = time.perf_counter()
    report = await ledger.boot_sweep()
    return time.perf_counter() - started, report.delivered


ROUNDS = 3
"""Rounds of each SQLite figure in a full run (one in a quick run). Each round measures the
ledger and then its floors, on files of its own; the figure is the best round of each side, as
the provider, notifier and HTTP benchmarks take theirs. On this shared machine, a disturbance
(another process, the disk's writeback) only ever adds time, and a single round's floor moved
by a third from one run to the next; every round is printed."""


Writer = Literal["thread", "process"]


def naming(writer: Writer) -> tuple[str, str]:
    """A SQLite figure's name suffix and label words for ``writer``: the process's figures keep
    the names their history has (``…_process``); the thread's labels say it is the thread."""
    return ("", ", the writer thread") if writer == "thread" else ("_process", "")


async def sqlite_round(
    folder: Path, replies: int, in_flight: int, writer: Writer = "thread"
) -> tuple[dict[str, float], int]:
    """One round of the SQLite ``submit`` figures and their floors, in ``folder``; and the
    statements the ledger's writer (of the hot statements: ``writer``) put in one group commit
    on average. The floors are at the batching the ledger had."""
    store = await open_store(folder / "bench.db", sqlite_writer=writer)
    assert isinstance(store, SQLiteLedgerStore)
    hot = store.hot
    await submit_rate(store, replies=min(2000, replies), in_flight=in_flight, tag="warm")
    hot.batches = hot.calls = 0
    rate = await submit_rate(store, replies=replies, in_flight=in_flight, tag="r")
    per_commit = max(1, round(hot.calls / max(1, hot.batches)))
    hot.batches = hot.calls = 0
    at_turn = await submit_rate(store, replies=replies, in_flight=in_flight, tag="t", begins=True)
    per_commit_turn = max(1, round(hot.calls / max(1, hot.batches)))
    await store.aclose()
    return {
        "submit": rate,
        "at_turn": at_turn,
        "floor": sqlite_floor(folder / "floor.db", replies=replies, per_commit=per_commit_turn),
        "merged": sqlite_floor_merged(folder / "merged.db", replies=replies, per_commit=per_commit),
        "merged3": sqlite_floor_merged(
            folder / "merged3.db", replies=replies, per_commit=per_commit, claimed_at_record=False
        ),
        "floor_one": sqlite_floor(folder / "floor1.db", replies=min(replies, 2000), per_commit=3),
    }, per_commit


async def bench_sqlite(
    folder: Path, replies: int, in_flight: int, rounds: int, writer: Writer = "thread"
) -> list[Figure]:
    taken: list[tuple[dict[str, float], int]] = []
    for _ in range(rounds):
        with tempfile.TemporaryDirectory(dir=folder) as here:
            taken.append(await sqlite_round(Path(here), replies, in_flight, writer))
    print(f"SQLite, the hot statements on the writer {writer}:")
    best = best_of_rounds("SQLite", [measured for measured, _ in taken])
    rate, at_turn, floor, merged = best["submit"], best["at_turn"], best["floor"], best["merged"]
    per_commit = ", ".join(str(per) for _, per in taken)
    suffix, where = naming(writer)
    # the targets are the gateway's default writer's (ADR 0187); the thread's figures stay, as
    # the writer of a store built by hand and of ``--ledger-writer thread``
    target_submit, target_turn = (None, None) if writer == "thread" else (0.6, 0.8)
    print(
        f"SQLite  submit (record+claim+delivered): {rate:10,.0f} replies/s "
        f"({in_flight} in flight, {per_commit} statements per group commit on average)"
    )
    print(f"SQLite  the same, claimed at the turn (the gateway's way): {at_turn:10,.0f} replies/s")
    print(
        f"SQLite  floor, single-row statements, same batching:{floor:10,.0f} replies/s  "
        f"ratio {rate / floor:.2f}"
    )
    print(
        f"SQLite  floor, the ledger's multi-row statements:   {merged:10,.0f} replies/s  "
        f"ratio {rate / merged:.2f}"
    )
    print(
        f"SQLite  the same, recorded, claimed, settled (three): {best['merged3']:8,.0f} "
        f"replies/s  ratio {rate / best['merged3']:.2f}"
    )
    print(
        f"SQLite  bare loop, one commit per reply:     {best['floor_one']:10,.0f} replies/s  "
        f"(the ledger is {rate / best['floor_one']:.1f}x that)"
    )
    return [
        Figure(
            name=f"ledger.sqlite_submit{suffix}",
            value=rate,
            unit="replies/s",
            floor=merged,
            target=target_submit,
            label=f"SQLite FULL{where}, submit (floor: the ledger's multi-row statements)",
        ),
        Figure(
            name=f"ledger.sqlite_at_turn{suffix}",
            value=at_turn,
            unit="replies/s",
            floor=floor,
            target=target_turn,
            label=f"SQLite FULL{where}, claimed at the turn (floor: single-row statements)",
        ),
    ]


async def bench_sqlite_sweep(
    folder: Path, sweep_rows: int, rounds: int, writer: Writer = "thread"
) -> list[Figure]:
    times = []
    for _ in range(rounds):
        with tempfile.TemporaryDirectory(dir=folder) as here:
            sweep_db = Path(here) / "sweep.db"
            seeded = await open_store(sweep_db, sqlite_writer="thread")
            await seeded.aclose()
            seed_sqlite(sweep_db, sweep_rows)
            store = await open_store(sweep_db, sqlite_writer=writer)
            times.append(await sweep_rate(store))
            await store.aclose()
    elapsed, delivered = min(times)
    suffix, where = naming(writer)
    print(
        f"SQLite{where}: boot sweep over {sweep_rows:,} rows: {elapsed:6.2f} s "
        f"({delivered / elapsed:,.0f} rows/s claimed and delivered; the best of "
        f"{', '.join(f'{t:.2f}' for t, _ in times)} s)"
    )
    return [
        Figure(
            name=f"ledger.sqlite_boot_sweep{suffix}",
            value=elapsed,
            unit="s",
            target=2.0 * sweep_rows / 100_000,
            higher_is_better=False,
            label=f"SQLite{where}: boot sweep over {sweep_rows:,} pending rows "
            "(target: 2 s per 100,000)",
        ),
    ]


async def pg_floor(url: str, table: str, *, replies: int, connections: int) -> float:
    import psycopg

    conns = [
        await psycopg.AsyncConnection.connect(url, autocommit=True) for _ in range(connections)
    ]
    per = replies // connections

    async def worker(conn: Any, offset: int) -> None:
        for index in range(offset, offset + per):
            oid = f"floor{index}"
            now = time.time()
            await conn.execute(
                f"INSERT INTO {table} (id, profile, platform, channel, text, chunks, state, "
                "owner, created_at, updated_at) VALUES (%s, 'X', 'console', 'C1', %s, '', "
                "'pending', 'me', %s, %s) ON CONFLICT (id) DO NOTHING RETURNING id",
                (oid, "reply text", now, now),
            )
            await conn.execute(
                f"UPDATE {table} SET state = 'attempting', owner = 'me', fence = fence + 1, "
                "attempts = attempts + 1, updated_at = %s WHERE id = %s AND fence = 0 "
                "RETURNING id",
                (now, oid),
            )
            await conn.execute(
                f"UPDATE {table} SET state = 'delivered', updated_at = %s, "
                "delivered = delivered || %s::jsonb WHERE id = %s AND fence = 1 "
                "AND owner = 'me' AND state = 'attempting'",
                (now, '[["C1", "1", null]]', oid),
            )

    started = time.perf_counter()
    async with anyio.create_task_group() as group:
        for number, conn in enumerate(conns):
            group.start_soon(worker, conn, number * per)
    elapsed = time.perf_counter() - started
    for conn in conns:
        await conn.close()
    return per * connections / elapsed


async def bench_postgres(
    replies: int, sweep_rows: int, in_flight: int, parts: frozenset[str]
) -> list[Figure]:

    from bridge_core.ledger.postgres import PostgresLedgerStore

    prefix = f"bench{uuid.uuid4().hex[:8]}_"
    try:
        store = await open_store(PG_URL, table_prefix=prefix)
    except Exception as error:
        print(f"PostgreSQL not measured: {error}")
        return []
    assert isinstance(store, PostgresLedgerStore)
    try:
        found = []
        if "submit" in parts:
            found.append(await pg_submit(store, prefix, replies, in_flight))
        if "sweep" in parts:
            found.append(await pg_sweep(store, prefix, sweep_rows))
        return found
    finally:
        await store.drop_tables()
        await store.aclose()


async def pg_submit(store: Any, prefix: str, replies: int, in_flight: int) -> Figure:
    await submit_rate(store, replies=min(1000, replies), in_flight=in_flight, tag="warm")
    rate = await submit_rate(store, replies=replies, in_flight=in_flight, tag="r")
    size = store.connections
    floor = await pg_floor(PG_URL, f"{prefix}ledger", replies=replies, connections=size)
    print(
        f"Postgres submit (record+claim+delivered): {rate:9,.0f} replies/s "
        f"({in_flight} in flight, {size} connections)"
    )
    print(
        f"Postgres floor, same statements, {size} autocommit connections: {floor:9,.0f} "
        f"replies/s  ratio {rate / floor:.2f}"
    )
    return Figure(
        name="ledger.postgres_submit",
        value=rate,
        unit="replies/s",
        floor=floor,
        label=f"PostgreSQL submit (floor: same statements, {size} connections)",
    )


async def pg_sweep(store: Any, prefix: str, sweep_rows: int) -> Figure:
    import psycopg

    async with await psycopg.AsyncConnection.connect(PG_URL, autocommit=True) as conn:
        await conn.execute(f"DELETE FROM {prefix}ledger")
        now = time.time()
        async with (
            conn.cursor() as cursor,
            cursor.copy(
                f"COPY {prefix}ledger (id, profile, platform, channel, text, state, owner, "
                "created_at, updated_at) FROM STDIN"
            ) as copy,
        ):
            for index in range(sweep_rows):
                await copy.write_row(
                    (
                        f"sweep{index:07d}",
                        "X",
                        "console",
                        "C1",
                        "stored",
                        "pending",
                        "gone-host|1|0",
                        now + index * 1e-6,
                        now,
                    )
                )
        await conn.execute(f"ANALYZE {prefix}ledger")
    elapsed, delivered = await sweep_rate(store)
    print(
        f"Postgres boot sweep over {sweep_rows:,} rows: {elapsed:6.1f} s "
        f"({delivered / elapsed:,.0f} rows/s claimed and delivered)"
    )
    return Figure(
        name="ledger.postgres_boot_sweep",
        value=delivered / elapsed,
        unit="rows/s",
        target=10_000,
        label=f"PostgreSQL boot sweep over {sweep_rows:,} pending rows",
    )


QUICK = {"replies": 2000, "sweep_rows": 2000, "pg_replies": 500, "pg_sweep_rows": 1000}
"""The counts of a quick run (``--quick``, ``figures(quick=True)``): a few seconds."""


def figures(*, quick: bool = False) -> list[Figure]:
    """This module's figures (``bench/_figures.py``); ``quick``: small counts, for a smoke run."""
    if quick:
        sizes = dict(QUICK)
    else:
        sizes = {"replies": 30_000, "sweep_rows": 100_000, "pg_replies": 5000}
        sizes["pg_sweep_rows"] = 20_000
    parts = _parts(os.environ.get(ONLY_ENV))
    return anyio.run(measure, *sizes.values(), 512, False, parts, 1 if quick else ROUNDS)


WRITERS: tuple[Writer, ...] = ("thread", "process")
"""The SQLite figures are measured with the hot statements on the writer thread
(``--ledger-writer thread``) and in a writer process (ADR 0186, the gateway's default since
ADR 0187); the latter's figures are named ``…_process`` and carry the targets."""

ONLY_ENV = "BENCH_LEDGER_ONLY"
"""``sweep`` or ``submit``: the figures ``figures()`` measures (unset: all), for ``run_all.py``."""
PARTS = frozenset({"submit", "sweep"})


def _parts(only: str | None) -> frozenset[str]:
    if not only:
        return PARTS
    if only not in PARTS:
        raise SystemExit(f"{ONLY_ENV} / --only: one of {sorted(PARTS)}, not {only!r}")
    return frozenset({only})


async def measure(
    replies: int,
    sweep_rows: int,
    pg_replies: int,
    pg_sweep_rows: int,
    in_flight: int,
    no_postgres: bool,
    parts: frozenset[str] = PARTS,
    rounds: int = ROUNDS,
) -> list[Figure]:
    found: list[Figure] = []
    with tempfile.TemporaryDirectory() as folder:
        for writer in WRITERS:
            if "submit" in parts:
                found += await bench_sqlite(Path(folder), replies, in_flight, rounds, writer)
            if "sweep" in parts:
                found += await bench_sqlite_sweep(Path(folder), sweep_rows, rounds, writer)
    if not no_postgres:
        found += await bench_postgres(pg_replies, pg_sweep_rows, in_flight, parts)
    return found


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--replies", type=int, default=30_000)
    parser.add_argument("--sweep-rows", type=int, default=100_000)
    parser.add_argument("--pg-replies", type=int, default=5_000)
    parser.add_argument(
        "--pg-sweep-rows", type=int, default=20_000, help="rows for the PostgreSQL boot sweep"
    )
    parser.add_argument("--in-flight", type=int, default=512)
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--quick", action="store_true", help="small counts, one round")
    parser.add_argument(
        "--rounds", type=int, default=ROUNDS, help="rounds of each SQLite figure (the best is kept)"
    )
    parser.add_argument(
        "--only", choices=sorted(PARTS), help="only the boot sweeps, or only the rest"
    )
    args = parser.parse_args()
    if args.quick:
        args.replies, args.sweep_rows, args.pg_replies, args.pg_sweep_rows = QUICK.values()
        args.rounds = 1
    found = await measure(
        args.replies,
        args.sweep_rows,
        args.pg_replies,
        args.pg_sweep_rows,
        args.in_flight,
        args.no_postgres,
        _parts(args.only or os.environ.get(ONLY_ENV)),
        max(1, args.rounds),
    )
    print_table(found)


if __name__ == "__main__":
    anyio.run(main)
