"""Benchmark: fleet events per second through ``Notifier.handle_all`` (the gateway's entry).

The gateway hands the notifier a request's events (the events route) or a stream entry's (a
scale-out host) in one call, so the target figure feeds batches of ``BATCH`` (the size the events
route is measured with) and the floor loops over the same batch lists; ``notify.handle_one``
feeds the same stream one event per ``handle`` call, beside its own floor, with no target
(ADR 0157).

One channel, 1,000 live agents with their own live messages, the default kinds filter plus a
workspace filter, and a running ``ChannelSender`` (a provider that keeps nothing, Slack's rate)
draining the submissions, on asyncio (the production backend). The stream mixes status changes
(the bulk), kinds that do not notify (Output, ToolStarted), events of a filtered-out workspace,
and agents finishing and respawning. The floor is a bare loop that only stores each event in a dict.

Peak memory (tracemalloc) is measured for 10^4, 10^5 and 10^6 events over the same 1,000 agents;
it must stay flat, since pending work is bounded by live agents, not by events.

    python bench/bench_notify.py            # full run
    python bench/bench_notify.py --quick    # smaller counts, for a smoke test
"""

from __future__ import annotations

import argparse
import gc
import random
import time
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial

import anyio
import anyio.lowlevel
from _figures import Figure, print_table
from _null_provider import NullProvider
from bridge_slack import SLACK_BUDGET

from bridge_core.events import (
    AgentFinished,
    AgentSpawned,
    FleetEvent,
    Outcome,
    Output,
    StatusChanged,
    ToolStarted,
)
from bridge_core.notify import Notifier, NotifyConfig
from bridge_core.sending import ChannelSender

AGENTS = 1_000
WORKSPACES = [f"w{n}" for n in range(10)]
WATCHED = frozenset(WORKSPACES[:9])  # w9 is filtered out by the channel
# Slack's steady rate (1/s, edits 2 s apart), with a burst that lets the 1,000 first posts out
# during setup: the measured phase then runs at the platform's pace with every message live.
BUDGET = replace(SLACK_BUDGET, burst=AGENTS)
YIELD_EVERY = 1_000  # let the sender and timers run, as a gateway's awaits between events would
BATCH = 100  # events per request, as bench/bench_gateway_http.py posts them


def event_pool(size: int, *, churn: bool, seed: int = 1) -> list[FleetEvent]:
    """A reusable stream: cycling through it keeps the benchmark's own memory constant.

    With ``churn``, 0.1 % of events finish an agent and 0.1 % respawn one: each ended life owes
    a final edit until the budget lets it out, so memory then follows undelivered terminal
    states, not events; the memory runs use a steady fleet of exactly 1,000 agents.
    """
    rng = random.Random(seed)
    pool: list[FleetEvent] = []
    for n in range(size):
        index = rng.randrange(AGENTS)
        name, ws = f"agent-{index}", WORKSPACES[index % 9]
        roll = rng.random()
        if roll < 0.55:
            pool.append(StatusChanged(name, ws, status=f"step {n}"))
        elif roll < 0.75:
            pool.append(Output(name, ws, text="chunk of output"))
        elif roll < 0.85:
            pool.append(ToolStarted(name, ws, tool="grep"))
        elif roll < 0.998 or not churn:
            pool.append(StatusChanged(f"other-{index}", WORKSPACES[9], status="filtered"))
        elif roll < 0.999:
            pool.append(AgentFinished(name, ws, outcome=Outcome.DONE, cost=0.1, turns=3))
        else:
            pool.append(AgentSpawned(name, ws))  # a respawn after finishing
    return pool


def batches_of(pool: Sequence[FleetEvent]) -> list[list[FleetEvent]]:
    """``pool`` cut into lists of ``BATCH`` events, as requests deliver them."""
    return [list(pool[n : n + BATCH]) for n in range(0, len(pool), BATCH)]


def floor_rate(pool: Sequence[FleetEvent], count: int) -> float:
    """A dict store per event, indexing the pool as ``run_notifier`` does one at a time."""
    state: dict[str, FleetEvent] = {}
    size = len(pool)
    start = time.perf_counter()
    for n in range(count):
        event = pool[n % size]
        state[event.agent] = event
    return count / (time.perf_counter() - start)


def batch_floor_rate(batches: Sequence[list[FleetEvent]], count: int) -> float:
    """A dict store per event, looping over the same batch lists as ``handle_all`` gets."""
    state: dict[str, FleetEvent] = {}
    size = len(batches)
    start = time.perf_counter()
    for n in range(count // BATCH):
        for event in batches[n % size]:
            state[event.agent] = event
    return count / (time.perf_counter() - start)


async def run_notifier(
    pool: Sequence[FleetEvent],
    counts: Sequence[int],
    measure_memory: bool,
    before_each: Callable[[int], object] | None = None,
    *,
    batched: bool = True,
) -> list[tuple[int, float, int, int]]:
    """For each count: (count, events per second, peak bytes above the settled state, the
    settled state's bytes: provider, sender and notifier with 1,000 live agents).
    ``before_each(count)`` runs before each count is measured (a round of the floor).
    ``batched``: the pool's batches through ``handle_all``, else one ``handle`` per event."""
    gc.collect()  # the previous run's channel must not be freed inside this one's figures
    before = tracemalloc.get_traced_memory()[0] if measure_memory else 0
    provider = NullProvider()
    sender = ChannelSender(provider, channel="bench", budget=BUDGET)
    config = NotifyConfig(hold=0.0, threshold=AGENTS + 1, workspaces=WATCHED)
    notifier = Notifier("bench", sender, capabilities=provider.capabilities, config=config)
    results = []
    settled: list[int] = []
    async with anyio.create_task_group() as group:
        group.start_soon(sender.run)
        group.start_soon(notifier.run)
        for index in range(AGENTS):
            notifier.handle(AgentSpawned(f"agent-{index}", WORKSPACES[index % 9]))
        with anyio.fail_after(30):  # every agent's live message is posted before measuring
            while provider.sends < AGENTS:  # noqa: ASYNC110
                await anyio.sleep(0.01)
        assert notifier.live_agents == AGENTS
        size = len(pool)
        handle, handle_all = notifier.handle, notifier.handle_all
        batches = batches_of(pool)
        for count in counts:
            if before_each is not None:
                before_each(count)
            gc.collect()
            if measure_memory:
                tracemalloc.reset_peak()
                baseline = tracemalloc.get_traced_memory()[0]
                settled.append(baseline - before)
            start = time.perf_counter()
            done = 0
            while done < count:
                chunk = min(YIELD_EVERY, count - done)
                if batched:
                    for n in range(done // BATCH, (done + chunk) // BATCH):
                        handle_all(batches[n % len(batches)])
                else:
                    for n in range(done, done + chunk):
                        handle(pool[n % size])
                done += chunk
                await anyio.lowlevel.checkpoint()
            elapsed = time.perf_counter() - start
            peak = tracemalloc.get_traced_memory()[1] - baseline if measure_memory else 0
            results.append((count, count / elapsed, peak, settled[-1] if settled else 0))
        # Bounded by agents (a finished agent's final edit may wait beside its respawn's post).
        assert sender.queued <= 2 * AGENTS, sender.queued
        assert provider.sends > 0  # the sender really ran beside the notifier
        group.cancel_scope.cancel()
    return results


def _floor_round(floors: list[float], floor_of: Callable[[int], float], count: int) -> None:
    floors.append(floor_of(count))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller counts")
    args = parser.parse_args(argv)
    print_table(figures(quick=args.quick))


def figures(*, quick: bool = False) -> list[Figure]:
    """This module's figures (``bench/_figures.py``); ``quick``: smaller counts."""
    speed_count = 200_000 if quick else 1_000_000
    memory_counts = [10_000, 100_000] if quick else [10_000, 100_000, 1_000_000]
    pool = event_pool(50_000, churn=True)

    batches = batches_of(pool)

    # Ten rounds on one notifier, each after a round of the floor, the best of each kept: a
    # change of the machine's load during the run then moves both figures alike.
    found = []
    for batched, name, entry, floor_of in (
        (True, "notify.handle", "handle_all", lambda n: batch_floor_rate(batches, n)),
        (False, "notify.handle_one", "handle", lambda n: floor_rate(pool, n)),
    ):
        floors: list[float] = []
        rounds = anyio.run(
            partial(run_notifier, batched=batched),
            pool,
            [speed_count // 10] * 10,
            False,
            partial(_floor_round, floors, floor_of),
            backend="asyncio",
        )
        count, floor, rate = speed_count, max(floors), max(r for _, r, _, _ in rounds)
        unit = f"batches of {BATCH}" if batched else "one event a call"
        print(f"Notifier.{entry} ({unit}) over {count:,} events, {AGENTS:,} live agents (with")
        print("churn), filters and sender on, asyncio (best of 10 rounds, each after the floor's):")
        print(f"  notifier        : {rate:>12,.0f} events/s  (target >= 300,000)")
        print(f"  floor (dict)    : {floor:>12,.0f} events/s")
        print(
            f"  ratio           : {rate / floor:>12.3f} of the floor ({floor / rate:.1f}x slower)"
        )
        found.append(
            Figure(
                name=name,
                value=rate,
                unit="events/s",
                floor=floor,
                # the target applies to the entry the gateway calls (ADR 0157)
                target=0.5 if batched else None,
                label=f"Notifier.{entry}, {unit}, {AGENTS:,} live agents "
                "(floor: a dict store per event, looping alike)",
            )
        )

    steady = event_pool(50_000, churn=False)
    tracemalloc.start()
    memory = [
        anyio.run(run_notifier, steady, [count], True, backend="asyncio")[0]
        for count in memory_counts
    ]
    tracemalloc.stop()
    print("memory, each count on a fresh channel with 1,000 live agents (tracemalloc):")
    for count, _, peak, settled in memory:
        print(
            f"  {count:>9,} events : state {settled / 1024:>7.1f} KiB, "
            f"peak above it {peak / 1024:>6.1f} KiB"
        )
    peaks = [peak for _, _, peak, _ in memory]
    state = min(settled for _, _, _, settled in memory)
    # Flat: a hundredfold more events may not cost more than a tenth of the agents' state
    # (dict tables for 1,000 keys resize now and then: that is the noise allowed here).
    flat = max(peaks) - min(peaks) <= state / 10
    spread = (max(peaks) - min(peaks)) / 1024
    print(f"  flat            : {'yes' if flat else 'NO'} (peaks spread over {spread:.1f} KiB)")
    found += [
        Figure(
            name="notify.memory_peak",
            value=peak / 1024,
            unit="KiB",
            higher_is_better=False,
            label=f"peak above the settled state, {AGENTS:,} live agents",
            scale="events",
            n=count,
        )
        for count, _, peak, _ in memory
    ]
    found.append(
        Figure(
            name="notify.memory_spread",
            value=spread,
            unit="KiB",
            target=state / 10 / 1024,
            higher_is_better=False,
            label="memory flat over events: peaks' spread within a tenth of the agents' state",
        )
    )
    return found


if __name__ == "__main__":
    main()
