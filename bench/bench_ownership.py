"""Ownership benchmarks: owner decisions, a big takeover, turns/s through the Redis and SQLite logs.

Run: ``python bench/bench_ownership.py [--turns 5000] [--redis redis://127.0.0.1:6379/0]``.
Each figure is printed with its floor measured in the same run:

- owner decision per turn with 2, 16, 128 members (target < 5 us at 16); floor: the bare
  xxh3 calls (one per member) the decision cannot avoid;
- a takeover of 10,000 conversations passed to a departed member (one leave record folded);
- turns/s admitted through the Redis log and delivered to three members (admission, fold,
  owner, on_turn); floor: raw XADD by the same number of concurrent writers with three raw
  XREAD readers on the same server;
- the same through the in-memory log (no I/O: what the three members themselves cost);
- the same through the SQLite log; floor: bare INSERTs of the same rows at the same durability
  (WAL, synchronous=FULL) committed in batches of the size the log's group commit reached.

The two logs' figures and floors are the best of ``--rounds`` rounds (``ROUNDS``), every round
printed.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import xxhash
from _figures import Figure, best_of_rounds, print_table

from bridge_core.conversation import Join, Leave, LeaveReason, Turn
from bridge_core.ownership import AgentGroupMember, GroupView, member_seed
from bridge_core.provider import InboundMessage

WRITERS = 8
ROUNDS = 3
"""Rounds of each log figure in a full run, the log and its floor in turn; the best of each side
is kept (as in ``bench_ledger.py``): a single round's floor moved by a third between runs."""


def bench_owner(members: int, conversations: int = 20_000) -> tuple[float, float]:
    view = GroupView(me=None, members={f"gateway-{i}:{i:08x}": 0.0 for i in range(members)})
    keys = [f"C0123456/u/U{i:09d}" for i in range(conversations)]
    owner = view.owner
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for key in keys:
            owner(key, 1.0)
        best = min(best, (time.perf_counter() - start) / conversations)
    seeds = [member_seed(f"gateway-{i}:{i:08x}") for i in range(members)]
    h = xxhash.xxh3_64_intdigest
    floor = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for key in keys:
            raw = key.encode()
            for seed in seeds:
                h(raw, seed)
        floor = min(floor, (time.perf_counter() - start) / conversations)
    return best, floor


def bench_takeover(passed: int = 10_000) -> tuple[float, int]:
    members = ["a", "b", "c", "d"]
    records: list[Any] = [Join("C", i + 1, 0.0, m, 0.0) for i, m in enumerate(members)]
    view = GroupView(me="b", members={}, max_conversations=100_000)
    for record in records:
        view.apply(record)
    seq = len(records)
    i = 0
    # turns until `passed` conversations are pending on member a (one conversation a turn;
    # counted through owner(), since pending_conversations() copies a set on every call)
    on_a = 0
    while on_a < passed:
        seq += 1
        conversation = f"C/u/user{i}"
        on_a += view.owner(conversation, 1.0) == "a"
        view.apply(Turn("C", conversation, seq, 1.0, f"m{seq}", f"user{i}", "hi"))
        i += 1
    assert len(view.pending_conversations("a")) == passed
    start = time.perf_counter()
    delivered = view.apply(Leave("C", seq + 1, 2.0, "a", LeaveReason.EXPIRED))
    return time.perf_counter() - start, len(delivered)


async def through_log(opener: Any, turns: int, *, members: int = 3) -> float:
    """Turns/s from concurrent admission to delivery by ``members`` members (each folds them
    all; ``bench_scale.py`` varies the count)."""
    count = members
    logs = [await opener() for _ in range(count + 1)]
    done = anyio.Event()
    delivered = 0

    async def on_turn(turn: Turn, history: Any) -> None:
        nonlocal delivered
        delivered += 1
        if delivered == turns:
            done.set()

    group = [
        AgentGroupMember(logs[i], member_id=f"bench{i}", on_turn=on_turn, settle=0.0, heartbeat=1.0)
        for i in range(count)
    ]
    admitter = logs[count]
    async with anyio.create_task_group() as tg:
        for member in group:
            tg.start_soon(member.run)
        for member in group:
            await member.ready.wait()
        await anyio.sleep(0.05)
        start = time.perf_counter()

        async def write(offset: int) -> None:
            for i in range(offset, turns, WRITERS):
                await admitter.admit(
                    InboundMessage(
                        message_id=f"b{i}", channel="C", author=f"u{i % 500}", text="hi", at=0.0
                    )
                )

        async with anyio.create_task_group() as writers:
            for offset in range(WRITERS):
                writers.start_soon(write, offset)
        await done.wait()
        elapsed = time.perf_counter() - start
        for member in group:
            assert member.view is not None
            while member.view.statistics().turns < turns:  # noqa: ASYNC110
                await anyio.sleep(0.01)
        elapsed = time.perf_counter() - start
        for member in group:
            member.stop()
    for log in logs:
        await log.aclose()
    return turns / elapsed


async def raw_redis(url: str, turns: int) -> float:
    import redis.asyncio as aioredis

    key = f"bench-raw-{uuid.uuid4().hex[:8]}"
    clients = [aioredis.Redis.from_url(url, decode_responses=True) for _ in range(4)]
    seen = [0, 0, 0]

    async def reader(index: int) -> None:
        cursor = "0-0"
        client = clients[index]
        while seen[index] < turns:
            reply = await client.xread({key: cursor}, count=1000, block=1000)
            for _k, entries in reply or ():
                for entry_id, _fields in entries:
                    cursor = entry_id
                    seen[index] += 1

    async def write(offset: int) -> None:
        for i in range(offset, turns, WRITERS):
            await clients[3].xadd(
                key, {"k": "t", "c": f"C/u/u{i % 500}", "m": f"b{i}", "a": "u", "x": "hi"}
            )

    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for index in range(3):
            tg.start_soon(reader, index)
        for offset in range(WRITERS):
            tg.start_soon(write, offset)
    elapsed = time.perf_counter() - start
    await clients[3].delete(key)
    for client in clients:
        await client.aclose()
    return turns / elapsed


def raw_sqlite(path: str, turns: int, batch: int) -> float:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute(
        "CREATE TABLE raw (seq INTEGER PRIMARY KEY AUTOINCREMENT, channel TEXT, kind TEXT, "
        "inserted_at REAL, conversation TEXT, message_id TEXT, author TEXT, body TEXT)"
    )
    conn.execute(
        "CREATE TABLE raw_seen (channel TEXT, message_id TEXT, "
        "PRIMARY KEY (channel, message_id)) WITHOUT ROWID"
    )
    start = time.perf_counter()
    i = 0
    while i < turns:
        conn.execute("BEGIN IMMEDIATE")
        for _ in range(min(batch, turns - i)):
            conn.execute("INSERT INTO raw_seen VALUES ('C', ?)", (f"b{i}",))
            conn.execute(
                "INSERT INTO raw (channel, kind, inserted_at, conversation, message_id, author, "
                "body) VALUES ('C', 'turn', ?, ?, ?, 'u', 'hi')",
                (time.time(), f"C/u/u{i % 500}", f"b{i}"),
            )
            i += 1
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - start
    conn.close()
    return turns / elapsed


def figures(*, quick: bool = False) -> list[Figure]:
    """This module's figures (``bench/_figures.py``); ``quick``: fewer turns and one round."""
    url = "redis://127.0.0.1:6379/0"
    return measure(turns=1000 if quick else 5000, redis_url=url, rounds=1 if quick else ROUNDS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=5000)
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="of each log figure")
    args = parser.parse_args()
    print_table(measure(turns=args.turns, redis_url=args.redis, rounds=max(1, args.rounds)))


def measure(*, turns: int, redis_url: str, rounds: int = ROUNDS) -> list[Figure]:
    found: list[Figure] = []
    print("owner decision per turn (GroupView.owner; floor = bare xxh3 per member)")
    for members in (2, 16, 128):
        ours, floor = bench_owner(members)
        print(
            f"  {members:4d} members: {ours * 1e6:7.2f} us   floor {floor * 1e6:7.2f} us   "
            f"ratio {ours / floor:4.2f}"
        )
        found.append(
            Figure(
                name="ownership.owner_decision",
                value=ours * 1e6,
                unit="us",
                floor=floor * 1e6,
                higher_is_better=False,
                label="owner decision per turn (floor: bare xxh3 per member)",
                scale="members",
                n=members,
            )
        )
    found.append(
        Figure(
            name="ownership.owner_decision_16",
            value=found[1].value,
            unit="us",
            target=5.0,
            higher_is_better=False,
            label="owner decision per turn, 16 members (target < 5 us)",
        )
    )
    times = []
    for _ in range(3):
        elapsed, delivered = bench_takeover()
        times.append(elapsed)
    print(
        f"takeover of 10,000 passed conversations: {min(times) * 1e3:.1f} ms "
        f"(median {statistics.median(times) * 1e3:.1f} ms; {delivered} turns delivered by one "
        f"of 3 remaining members)"
    )
    found.append(
        Figure(
            name="ownership.takeover_10k",
            value=min(times) * 1e3,
            unit="ms",
            higher_is_better=False,
            label="takeover of 10,000 passed conversations (one leave folded)",
        )
    )

    async def redis_round() -> dict[str, float]:
        from bridge_core.ownership.redis_log import RedisConversationLog

        prefix = f"bench-{uuid.uuid4().hex[:8]}"

        async def opener() -> Any:
            return await RedisConversationLog.connect(redis_url, channel="bench", key_prefix=prefix)

        ours = await through_log(opener, turns)
        floor = await raw_redis(redis_url, turns)
        import redis.asyncio as aioredis

        client = aioredis.Redis.from_url(redis_url)
        keys = [key async for key in client.scan_iter(match=f"{prefix}:*")]
        if keys:
            await client.delete(*keys)
        await client.aclose()
        return {"ours": ours, "floor": floor}

    best = best_of_rounds("Redis log", [asyncio.run(redis_round()) for _ in range(rounds)])
    ours, floor = best["ours"], best["floor"]
    print(
        f"Redis log, {turns} turns, {WRITERS} writers -> 3 members: {ours:8.0f} turns/s   "
        f"raw XADD/XREAD floor {floor:8.0f} /s   ratio {ours / floor:4.2f}"
    )
    found.append(
        Figure(
            name="ownership.redis_log",
            value=ours,
            unit="turns/s",
            floor=floor,
            target=0.8,
            label=f"Redis log, {WRITERS} writers -> 3 members (floor: raw XADD/XREAD)",
        )
    )

    from bridge_core.ownership import MemoryConversationLog, MemoryLogStore

    store = MemoryLogStore()

    async def memory_opener() -> Any:
        return MemoryConversationLog(store, channel="C")

    ceiling = asyncio.run(through_log(memory_opener, turns))
    print(
        f"memory log (no I/O), {turns} turns -> 3 members: {ceiling:8.0f} turns/s "
        "(the members' own cost: the ceiling for any backend in one process)"
    )
    found.append(
        Figure(
            name="ownership.memory_log",
            value=ceiling,
            unit="turns/s",
            label="memory log (no I/O) -> 3 members: the members' own cost",
        )
    )

    from bridge_core.ownership.sqlite_log import SqliteConversationLog

    def sqlite_round() -> tuple[dict[str, float], int]:
        with tempfile.TemporaryDirectory() as tmp:
            path = str(Path(tmp) / "bridge.db")
            handles: list[SqliteConversationLog] = []

            async def opener() -> Any:
                # members are tasks of one process sharing the process's log handle
                if not handles:
                    handles.append(await SqliteConversationLog.open(path, channel="C"))
                return _Shared(handles[0])

            ours = asyncio.run(through_log(opener, turns))
            commits = handles[0].commits
            batch = max(1, round(turns / max(1, commits)))
            floor = raw_sqlite(str(Path(tmp) / "raw.db"), turns, batch)
            asyncio.run(handles[0].aclose())
        return {"ours": ours, "floor": floor}, batch

    taken = [sqlite_round() for _ in range(rounds)]
    best = best_of_rounds("SQLite log", [measured for measured, _ in taken])
    ours, floor = best["ours"], best["floor"]
    batch = max(taken, key=lambda round_: round_[0]["floor"])[1]  # the best floor's batches
    print(
        f"SQLite log (WAL, synchronous=FULL), {turns} turns -> 3 members: {ours:8.0f} "
        f"turns/s   bare INSERT floor (batches of {batch}) {floor:8.0f} /s   "
        f"ratio {ours / floor:4.2f}"
    )
    found.append(
        Figure(
            name="ownership.sqlite_log",
            value=ours,
            unit="turns/s",
            floor=floor,
            target=0.4,
            label=f"SQLite log (WAL, FULL) -> 3 members (floor: bare INSERTs, batches of {batch})",
        )
    )
    return found


class _Shared:
    """One SQLite handle lent to several members; closing it is the benchmark's job."""

    def __init__(self, log: Any) -> None:
        self._log = log

    def __getattr__(self, name: str) -> Any:
        return getattr(self._log, name)

    async def aclose(self) -> None:
        return None


if __name__ == "__main__":
    main()
