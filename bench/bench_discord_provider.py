"""Discord provider overhead: ``python bench/bench_discord_provider.py [--posts N]``.

Measured in one run against one FakeDiscord (real local HTTP, its own thread, its per-channel
limit off so the figures are the client's, not the pacing's):

- the floor: ``POST /channels/{id}/messages`` with a bare aiohttp session (keep-alive, the same
  JSON body, ``Authorization: Bot`` header and nonce the provider sends);
- ``DiscordProvider.post``: discord.py's client behind the provider (length check, nonce,
  deadline, per-call trace, message parsing, error mapping);
- ``DiscordProvider.edit`` (PATCH) likewise.

Prints calls per second and each figure's ratio to the floor. Calls are sequential, like one
channel's sender, so the figures are per-call latency more than server throughput.
"""

from __future__ import annotations

import argparse
import secrets
import time

import aiohttp
import anyio
from _figures import Figure, print_table
from bridge_discord import DiscordProvider, DiscordSettings
from bridge_discord.testing.fake_discord import FakeDiscord

CHANNEL = 111_111_111_111_111_111


async def floor(fake: FakeDiscord, count: int) -> float:
    headers = {"Authorization": f"Bot {fake.token}"}
    url = f"{fake.api_base}/channels/{CHANNEL}/messages"
    async with aiohttp.ClientSession() as session:
        started = time.perf_counter()
        for n in range(count):
            payload = {
                "content": f"floor {n}",
                "nonce": secrets.token_hex(12),
                "enforce_nonce": True,
                "allowed_mentions": {"parse": []},
            }
            async with session.post(url, json=payload, headers=headers) as response:
                assert response.status == 200, await response.text()
                await response.json()
        return count / (time.perf_counter() - started)


async def provider_rates(fake: FakeDiscord, count: int) -> tuple[float, float]:
    settings = DiscordSettings.model_validate({"token": fake.token, "api_base_url": fake.api_base})
    async with DiscordProvider(settings, profile="bench") as provider:
        ref = await provider.post(str(CHANNEL), "warm up")
        started = time.perf_counter()
        for n in range(count):
            await provider.post(str(CHANNEL), f"provider {n}")
        posts = count / (time.perf_counter() - started)
        started = time.perf_counter()
        for n in range(count):
            await provider.edit(ref, f"edit {n}")
        edits = count / (time.perf_counter() - started)
    return posts, edits


def figures(*, quick: bool = False) -> list[Figure]:
    """This module's figures (``bench/_figures.py``); ``quick``: 100 calls a figure."""
    return anyio.run(main, 100 if quick else 500)


async def main(count: int) -> list[Figure]:
    with FakeDiscord(channel_limit=None) as fake:
        fake.add_channel(CHANNEL)
        await floor(fake, 20)  # warm up the server
        base = await floor(fake, count)
        posts, edits = await provider_rates(fake, count)
    print(f"calls per figure: {count}")
    print(f"floor (bare aiohttp create message): {base:8.0f} /s  (1.00)")
    print(f"DiscordProvider.post:                {posts:8.0f} /s  ({posts / base:.2f} of floor)")
    print(f"DiscordProvider.edit:                {edits:8.0f} /s  ({edits / base:.2f} of floor)")
    return [
        Figure(
            name=f"discord.{verb}",
            value=rate,
            unit="calls/s",
            floor=base,
            label=f"DiscordProvider.{verb} (floor: bare aiohttp create message)",
        )
        for verb, rate in (("post", posts), ("edit", edits))
    ]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--posts", type=int, default=500)
    args = parser.parse_args()
    print_table(anyio.run(main, args.posts))
