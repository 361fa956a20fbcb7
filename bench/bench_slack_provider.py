"""Slack provider overhead: ``python bench/bench_slack_provider.py [--posts N]``.

Measured in one run against one FakeSlack (real local HTTP, its own thread):

- the floor: ``chat.postMessage`` with a bare aiohttp session (one keep-alive connection, the
  same JSON body and Bearer header the SDK sends);
- ``SlackProvider.post``: slack-sdk's ``AsyncWebClient`` behind the provider (length check,
  parameters, response validation, error mapping) on the same kind of session;
- ``SlackProvider.edit`` (``chat.update``) likewise.

Prints calls per second (best of interleaved rounds) and each figure's ratio to the floor.
Sequential calls, like one channel's sender: the figures are per-call latency, not server
throughput.
"""

from __future__ import annotations

import argparse
import time

import aiohttp
import anyio
from _figures import Figure, print_table
from bridge_slack import SlackProvider, SlackSettings
from bridge_slack.testing.fake_slack import FakeSlack


async def floor(fake: FakeSlack, count: int) -> float:
    headers = {"Authorization": f"Bearer {fake.token}"}
    url = fake.api_url + "chat.postMessage"
    async with aiohttp.ClientSession() as session:
        started = time.perf_counter()
        for n in range(count):
            payload = {"channel": "C0GENERAL", "text": f"floor {n}", "link_names": False}
            async with session.post(url, json=payload, headers=headers) as response:
                data = await response.json()
                assert data["ok"], data
        return count / (time.perf_counter() - started)


async def provider_rates(fake: FakeSlack, count: int) -> tuple[float, float]:
    settings = SlackSettings.model_validate({"bot_token": fake.token, "api_base_url": fake.api_url})
    async with SlackProvider(settings) as provider:
        ref = await provider.post("C0GENERAL", "warm up")
        started = time.perf_counter()
        for n in range(count):
            await provider.post("C0GENERAL", f"provider {n}")
        posts = count / (time.perf_counter() - started)
        started = time.perf_counter()
        for n in range(count):
            await provider.edit(ref, f"edit {n}")
        edits = count / (time.perf_counter() - started)
    return posts, edits


def figures(*, quick: bool = False) -> list[Figure]:
    """This module's figures (``bench/_figures.py``); ``quick``: 100 calls, 1 round."""
    return anyio.run(main, 100, 1) if quick else anyio.run(main, 300, 3)


async def main(count: int, rounds: int) -> list[Figure]:
    base = posts = edits = 0.0
    with FakeSlack() as fake:
        await floor(fake, 20)  # warm up the server and the connection pool
        for _ in range(rounds):  # interleaved, best of each: the machine is shared
            base = max(base, await floor(fake, count))
            round_posts, round_edits = await provider_rates(fake, count)
            posts, edits = max(posts, round_posts), max(edits, round_edits)
    print(f"calls per figure: {count}, best of {rounds} interleaved rounds")
    print(f"floor (bare aiohttp chat.postMessage): {base:8.0f} /s  (1.00)")
    print(f"SlackProvider.post:                    {posts:8.0f} /s  ({posts / base:.2f} of floor)")
    print(f"SlackProvider.edit:                    {edits:8.0f} /s  ({edits / base:.2f} of floor)")
    return [
        Figure(
            name=f"slack.{verb}",
            value=rate,
            unit="calls/s",
            floor=base,
            label=f"SlackProvider.{verb} (floor: bare aiohttp chat.postMessage)",
        )
        for verb, rate in (("post", posts), ("edit", edits))
    ]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--posts", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print_table(anyio.run(main, args.posts, args.rounds))
