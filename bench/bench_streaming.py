"""Benchmark: text deltas per second one streamed reply absorbs, and its memory, 10^3..10^6 deltas.

One ``ReplyStream`` on a running ``ChannelSender`` (a provider that keeps nothing, Slack's budget:
a post, then an edit every 2 s, each rendering the latest text), on asyncio (the production
backend). Deltas are 3-character tokens taken from a small pool, so the input costs no memory.
The stream yields to the event loop every 1,000 deltas, as an agent's awaits between tokens would.

The floor is a bare loop appending each delta to a ``str`` (CPython grows it in place), in the
same run: the least any code can do that keeps the text. Peak memory (tracemalloc) is compared
with the floor's at each size: the stream holds the text (and, while rendering, a copy or two
of it), never one object per delta, so the ratio stays flat as deltas grow.

    python bench/bench_streaming.py            # 10^3 .. 10^6 deltas
    python bench/bench_streaming.py --quick    # up to 10^5, for a smoke test
"""

from __future__ import annotations

import argparse
import gc
import time
import tracemalloc
from collections.abc import Callable

import anyio
import anyio.lowlevel
from _figures import Figure, print_table
from _null_provider import NullProvider
from bridge_slack import SLACK_BUDGET

from bridge_core.runtime.streaming import reply_splitter
from bridge_core.sending import ChannelSender
from bridge_core.streams import ReplyStream

POOL = [f"{i:02d} " for i in range(100)]
YIELD_EVERY = 1_000


def floor(count: int) -> str:
    text = ""
    pool = POOL
    for i in range(count):
        text += pool[i % 100]
    return text


async def streamed(count: int) -> tuple[float, int, int]:
    """Feed ``count`` deltas to one stream; (seconds, sends, parts)."""
    provider = NullProvider(max_length=3900)
    sender = ChannelSender(provider, channel="c", budget=SLACK_BUDGET)
    async with anyio.create_task_group() as group:
        group.start_soon(sender.run)
        stream = ReplyStream(sender, provider, key="r", split=reply_splitter(provider))
        pool = POOL
        feed = stream.feed
        checkpoint = anyio.lowlevel.checkpoint
        started = time.perf_counter()
        for i in range(count):
            feed(pool[i % 100])
            if i % YIELD_EVERY == YIELD_EVERY - 1:
                await checkpoint()
        elapsed = time.perf_counter() - started
        result = await stream.finish()
        group.cancel_scope.cancel()
    assert len(result.text) == 3 * count
    return elapsed, provider.sends, len(result.partials)


def peak(work: Callable[[], object]) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        work()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="up to 10^5 deltas")
    args = parser.parse_args()
    print_table(figures(quick=args.quick))


def figures(*, quick: bool = False) -> list[Figure]:
    """This module's figures (``bench/_figures.py``); ``quick``: up to 10^5 deltas."""
    sizes = [10**3, 10**4, 10**5] if quick else [10**3, 10**4, 10**5, 10**6]
    found: list[Figure] = []
    print(
        f"{'deltas':>9} {'stream/s':>12} {'floor/s':>12} {'ratio':>6} "
        f"{'peak KiB':>10} {'floor KiB':>10} {'ratio':>6} {'sends':>6} {'messages':>8}"
    )
    for count in sizes:
        started = time.perf_counter()
        floor(count)
        floor_rate = count / (time.perf_counter() - started)
        elapsed, sends, parts = anyio.run(streamed, count, backend="asyncio")
        rate = count / elapsed
        ours = peak(lambda: anyio.run(streamed, count, backend="asyncio"))  # noqa: B023
        bare = peak(lambda: floor(count))  # noqa: B023
        print(
            f"{count:>9} {rate:>12,.0f} {floor_rate:>12,.0f} {floor_rate / rate:>6.1f} "
            f"{ours / 1024:>10,.0f} {bare / 1024:>10,.0f} {ours / bare:>6.1f} {sends:>6} {parts:>8}"
        )
        found += [
            Figure(
                name="streaming.deltas",
                value=rate,
                unit="deltas/s",
                floor=floor_rate,
                label="text deltas one streamed reply absorbs (floor: str append)",
                scale="deltas",
                n=count,
            ),
            Figure(
                name="streaming.memory_peak",
                value=ours / 1024,
                unit="KiB",
                floor=bare / 1024,
                higher_is_better=False,
                label="peak memory of one streamed reply (floor: the bare str's)",
                scale="deltas",
                n=count,
            ),
        ]
    return found


if __name__ == "__main__":
    main()
