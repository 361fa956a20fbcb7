"""Scale: how the figures grow with the work, and memory that stays flat where the design bounds it.

    python bench/bench_scale.py            # the full run (10^6 ledger rows: a few minutes)
    python bench/bench_scale.py --quick    # small sizes, for a smoke run

Three axes, each figure at every size, measured in one run:

- channels (1, 10, 100): one ``Notifier`` and one ``ChannelSender`` per channel (a provider that
  keeps nothing, Slack's rate), 100 live agents each, the same number of status changes per
  channel at every size. Events per second should not fall with channels (the work per event
  does not depend on the others), and the memory per channel (tracemalloc, after setup and at
  the peak while handling) should stay flat: a channel's state is bounded by its live agents.
- ledger rows (10^3 .. 10^6): a boot sweep over N pending rows a dead process left (SQLite,
  ``synchronous=FULL``), each row claimed just before its own send. Rows per second should stay
  flat, and so should the sweep's peak memory: it reads the rows a page at a time
  (tracemalloc, in a second sweep of the same size, up to 10^5 rows: tracing slows the code).
- group members (2 .. 64): turns through the in-memory log to N members (every member folds
  every record; one delivers each turn), so the folds per second are the figure that should stay
  flat, and the owner decision per turn, which grows with members (one hash each).
- text length (10^4 .. 10^6 characters): an agent's text cut into parts of 4,000 UTF-8 bytes
  (``chunk``), all of it in the event loop. Characters per second should stay flat: the cutter
  segments only around each cut (ADR 0184). Prose has a floor, the regex module's segmentation
  of the whole text into grapheme clusters (what the cutter before did first); a run of flags
  has none, as that segmentation is quadratic in the run (16,000 flags took 1.3 s).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import sqlite3
import tempfile
import time
import tracemalloc
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
from _figures import Figure, print_table
from _null_provider import NullProvider
from bench_ownership import bench_owner, through_log
from bridge_slack import SLACK_BUDGET

from bridge_core.events import AgentSpawned, StatusChanged
from bridge_core.ledger import Delivery, DeliveryLedger, open_store
from bridge_core.ledger.sqlite import configure_connection
from bridge_core.notify import Notifier, NotifyConfig
from bridge_core.ownership import MemoryConversationLog, MemoryLogStore
from bridge_core.provider import LengthUnit, MessageRef
from bridge_core.sending import ChannelSender
from bridge_core.text import chunk

AGENTS_PER_CHANNEL = 100
YIELD_EVERY = 1_000


# --------------------------------------------------------------------------- channels


async def _channels_run(channels: int, events: int, memory: bool) -> tuple[float, int, int]:
    """(events/s, bytes after setup, peak bytes above that) for ``channels`` channels."""
    # every channel cycles through all of its agents (the stream is made before the baseline)
    pool = [
        StatusChanged(f"agent-{n % AGENTS_PER_CHANNEL}", "w", status=f"step {n}")
        for n in range(5_000)
    ]
    gc.collect()
    before = tracemalloc.get_traced_memory()[0] if memory else 0
    provider = NullProvider()
    budget = replace(SLACK_BUDGET, burst=AGENTS_PER_CHANNEL)
    config = NotifyConfig(hold=0.0, threshold=AGENTS_PER_CHANNEL + 1)
    handles = []
    async with anyio.create_task_group() as group:
        for number in range(channels):
            sender = ChannelSender(provider, channel=f"c{number}", budget=budget)
            notifier = Notifier(
                f"c{number}", sender, capabilities=provider.capabilities, config=config
            )
            group.start_soon(sender.run)
            group.start_soon(notifier.run)
            for agent in range(AGENTS_PER_CHANNEL):
                notifier.handle(AgentSpawned(f"agent-{agent}", "w"))
            handles.append(notifier.handle)
        with anyio.fail_after(60):  # every live message posted before measuring
            while provider.sends < channels * AGENTS_PER_CHANNEL:  # noqa: ASYNC110
                await anyio.sleep(0.01)
        gc.collect()
        settled = tracemalloc.get_traced_memory()[0] - before if memory else 0
        if memory:
            tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0] if memory else 0
        started = time.perf_counter()
        for n in range(events):
            handles[n % channels](pool[(n // channels) % 5_000])
            if n % YIELD_EVERY == YIELD_EVERY - 1:
                await anyio.lowlevel.checkpoint()
        elapsed = time.perf_counter() - started
        peak = tracemalloc.get_traced_memory()[1] - base if memory else 0
        group.cancel_scope.cancel()
    return events / elapsed, settled, peak


def channel_figures(sizes: Sequence[int], per_channel: int) -> list[Figure]:
    found = []
    for channels in sizes:
        events = per_channel * channels  # each channel does the same work at every size
        rate, _, _ = anyio.run(_channels_run, channels, events, False, backend="asyncio")
        tracemalloc.start()
        try:
            _, settled, peak = anyio.run(_channels_run, channels, events, True, backend="asyncio")
        finally:
            tracemalloc.stop()
        state, extra = settled / channels / 1024, peak / channels / 1024
        print(
            f"{channels:4d} channels: {rate:12,.0f} events/s; per channel {state:7.1f} KiB "
            f"after setup, peak above it while handling {extra:7.1f} KiB"
        )
        common = {"scale": "channels", "n": channels}
        found += [
            Figure(
                name="scale.channels_events",
                value=rate,
                unit="events/s",
                label=f"Notifier.handle over N channels, {AGENTS_PER_CHANNEL} live agents each",
                **common,
            ),
            Figure(
                name="scale.channels_memory",
                value=state,
                unit="KiB",
                higher_is_better=False,
                label="memory per channel after setup (notifier, sender, live messages)",
                **common,
            ),
            Figure(
                name="scale.channels_peak",
                value=extra,
                unit="KiB",
                higher_is_better=False,
                label="peak memory per channel above that state while handling events",
                **common,
            ),
        ]
    return found


# --------------------------------------------------------------------------- ledger rows


async def _deliver(delivery: Delivery) -> MessageRef:
    await delivery.begin()
    return MessageRef(delivery.channel, "1")


def _seed(path: Path, rows: int) -> None:
    """``rows`` pending rows left by a process that no longer runs."""
    conn = sqlite3.connect(path, isolation_level=None)
    configure_connection(conn)
    now = time.time()
    conn.execute("BEGIN")
    conn.executemany(
        "INSERT INTO ledger (id, profile, platform, channel, text, state, owner, created_at, "
        "updated_at) VALUES (?, 'X', 'console', 'C1', 'stored reply', 'pending', "
        "'gone-host|1|0', ?, ?)",
        ((f"sweep{index:08d}", now + index * 1e-6, now) for index in range(rows)),
    )
    conn.execute("COMMIT")
    conn.close()


async def _sweep(folder: Path, rows: int) -> tuple[float, int]:
    path = folder / f"sweep-{rows}-{time.monotonic_ns()}.db"
    store = await open_store(path, sqlite_writer="thread")  # the schema only
    await store.aclose()
    _seed(path, rows)
    store = await open_store(path)
    try:
        ledger = DeliveryLedger(store, deliver=_deliver, profiles={"X"})
        gc.collect()
        started = time.perf_counter()
        report = await ledger.boot_sweep()
        elapsed = time.perf_counter() - started
    finally:
        await store.aclose()
    assert report.delivered == rows, report
    return elapsed, report.delivered


def ledger_figures(sizes: Sequence[int], memory_up_to: int) -> list[Figure]:
    found = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for rows in sizes:
            elapsed, _ = anyio.run(_sweep, folder, rows)
            peak = None
            if rows <= memory_up_to:
                tracemalloc.start()
                try:
                    anyio.run(_sweep, folder, rows)
                    peak = tracemalloc.get_traced_memory()[1]
                finally:
                    tracemalloc.stop()
            shown = "" if peak is None else f", peak {peak / 1024:8.0f} KiB (traced run)"
            print(f"{rows:9,d} ledger rows: sweep {rows / elapsed:9,.0f} rows/s{shown}")
            found.append(
                Figure(
                    name="scale.ledger_sweep",
                    value=rows / elapsed,
                    unit="rows/s",
                    label="SQLite boot sweep over N pending rows, each claimed before its send",
                    scale="rows",
                    n=rows,
                )
            )
            if peak is not None:
                found.append(
                    Figure(
                        name="scale.ledger_sweep_peak",
                        value=peak / 1024,
                        unit="KiB",
                        higher_is_better=False,
                        label="the sweep's peak memory (tracemalloc); rows are read page by page",
                        scale="rows",
                        n=rows,
                    )
                )
    return found


# --------------------------------------------------------------------------- members


def member_figures(sizes: Sequence[int], turns: int) -> list[Figure]:
    found = []
    for members in sizes:
        store = MemoryLogStore()

        async def opener(store: MemoryLogStore = store) -> Any:
            return MemoryConversationLog(store, channel="C")

        rate = asyncio.run(through_log(opener, turns, members=members))
        decision, floor = bench_owner(members, conversations=5_000)
        print(
            f"{members:4d} members: {rate:9,.0f} turns/s, {rate * members:10,.0f} folds/s, "
            f"owner decision {decision * 1e6:6.2f} us (floor {floor * 1e6:6.2f} us)"
        )
        common = {"scale": "members", "n": members}
        found += [
            Figure(
                name="scale.members_turns",
                value=rate,
                unit="turns/s",
                label="turns through the memory log to N members (each folds every record)",
                **common,
            ),
            Figure(
                name="scale.members_folds",
                value=rate * members,
                unit="folds/s",
                label="records folded per second over all N members",
                **common,
            ),
            Figure(
                name="scale.owner_decision",
                value=decision * 1e6,
                unit="us",
                floor=floor * 1e6,
                higher_is_better=False,
                label="owner decision per turn (floor: bare xxh3 per member)",
                **common,
            ),
        ]
    return found


# --------------------------------------------------------------------------- text length

_PROSE = (
    "The deploy finished in 4 min; naïve caching saved 日本語 time 🦆 see <https://x.io/a|log>.\n"
)


def _rate(work: Any, characters: int) -> float:
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - started)
    return characters / best


def text_figures(sizes: Sequence[int]) -> list[Figure]:
    import regex

    clusters = regex.compile(r"\X", regex.DOTALL)
    found = []
    for characters in sizes:
        prose = (_PROSE * (characters // len(_PROSE) + 1))[:characters]
        flags = "🇫🇷" * (characters // 2)
        cut = _rate(functools.partial(chunk, prose, 4000, unit=LengthUnit.BYTES), characters)
        floor = _rate(functools.partial(clusters.findall, prose), characters)
        cut_flags = _rate(functools.partial(chunk, flags, 4000, unit=LengthUnit.BYTES), characters)
        print(
            f"{characters:9,d} characters: prose {cut:12,.0f} chars/s (floor {floor:12,.0f}), "
            f"flags {cut_flags:12,.0f} chars/s"
        )
        common = {"scale": "characters", "n": characters}
        found += [
            Figure(
                name="scale.text_cut",
                value=cut,
                unit="chars/s",
                floor=floor,
                label="prose cut into 4,000-byte parts (floor: segmenting it all into clusters)",
                **common,
            ),
            Figure(
                name="scale.text_cut_flags",
                value=cut_flags,
                unit="chars/s",
                label="a run of flags cut into 4,000-byte parts",
                **common,
            ),
        ]
    return found


def figures(*, quick: bool = False) -> list[Figure]:
    """This module's figures (``bench/_figures.py``); ``quick``: small sizes."""
    if quick:
        return [
            *channel_figures([1, 10, 100], per_channel=1_000),
            *ledger_figures([1_000, 10_000], memory_up_to=1_000),
            *member_figures([2, 8, 64], turns=100),
            *text_figures([10_000, 100_000]),
        ]
    return [
        *channel_figures([1, 10, 100], per_channel=5_000),
        *ledger_figures([1_000, 10_000, 100_000, 1_000_000], memory_up_to=100_000),
        *member_figures([2, 4, 8, 16, 32, 64], turns=1_000),
        *text_figures([10_000, 100_000, 1_000_000]),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes")
    args = parser.parse_args()
    print_table(figures(quick=args.quick))


if __name__ == "__main__":
    main()
