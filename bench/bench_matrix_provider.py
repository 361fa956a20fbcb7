"""Matrix provider overhead: ``python bench/bench_matrix_provider.py [--calls N]``.

Needs ``pip install './plugins/matrix[test]'`` (a throw-away Synapse is started for the run, in a
temp folder, on a loopback port). Measured in one run against that one homeserver, the bot's
message rate limit lifted (a per-user override) so the figures are the client's and the server's,
not the pacing's:

- the floor for a post: ``PUT /rooms/{room}/send/m.room.message/{txnId}`` with a bare
  ``httpx.AsyncClient`` (keep-alive, the same content the provider sends);
- ``MatrixProvider.post``: the provider (length and JSON-size checks, transaction id from the
  post key, deadline, error mapping);
- the floor for an edit: one bare ``PUT`` of an ``m.replace`` event;
- ``MatrixProvider.edit``: the provider's edit (one ``PUT``, after its check against the
  redactions it saw by ``/sync``).

Prints calls per second and each figure's ratio to its floor. Calls are sequential, like one
channel's sender, so the figures are per-call latency through Synapse (SQLite) more than its
throughput.
"""

from __future__ import annotations

import argparse
import secrets
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
from _figures import Figure, print_table
from bridge_matrix import MatrixProvider, MatrixSettings
from bridge_matrix.client import quote
from bridge_matrix.testing import Synapse, start_synapse

from bridge_core import MessageRef, posting_with_key


def content(text: str) -> dict[str, Any]:
    return {"msgtype": "m.text", "body": text, "m.mentions": {}}


class Floor:
    """The bare calls: one ``httpx.AsyncClient``, the same contents the provider sends."""

    def __init__(self, client: httpx.AsyncClient, room: str) -> None:
        self.client = client
        self.path = f"/_matrix/client/v3/rooms/{quote(room)}/send/m.room.message/"
        self.target = ""

    async def post(self, text: str) -> str:
        answer = await self.client.put(self.path + secrets.token_hex(16), json=content(text))
        assert answer.status_code == 200, answer.text
        return str(answer.json()["event_id"])

    async def edit(self, text: str) -> None:
        edit = {
            **content(f"* {text}"),
            "m.new_content": content(text),
            "m.relates_to": {"rel_type": "m.replace", "event_id": self.target},
        }
        answer = await self.client.put(self.path + secrets.token_hex(16), json=edit)
        assert answer.status_code == 200, answer.text


async def measure(
    synapse: Synapse, token: str, settings: MatrixSettings, room: str, count: int
) -> dict[str, float]:
    """Calls per second of each of the four, in interleaved rounds (the room grows as the run
    goes, and the machine's load drifts: interleaving shares both out evenly)."""
    spent = {"floor post": 0.0, "provider post": 0.0, "floor edit": 0.0, "provider edit": 0.0}
    rounds, per_round = 10, max(1, count // 10)
    async with (
        httpx.AsyncClient(
            base_url=synapse.base_url, headers={"Authorization": f"Bearer {token}"}
        ) as client,
        MatrixProvider(settings, profile="bench") as provider,
    ):
        floor = Floor(client, room)
        floor.target = await floor.post("floor target")
        ref: MessageRef = await provider.post(room, "provider target")
        for round_number in range(rounds):
            for name in spent:
                started = time.perf_counter()
                for n in range(per_round):
                    text = f"{name} {round_number}.{n}"
                    if name == "floor post":
                        await floor.post(text)
                    elif name == "provider post":
                        with posting_with_key(f"bench-{secrets.token_hex(4)}:{n}"):
                            await provider.post(room, text)
                    elif name == "floor edit":
                        await floor.edit(text)
                    else:
                        await provider.edit(ref, text)
                spent[name] += time.perf_counter() - started
    return {name: rounds * per_round / seconds for name, seconds in spent.items()}


def figures(*, quick: bool = False) -> list[Figure]:
    """This module's figures (``bench/_figures.py``); none in a quick run: starting Synapse
    alone takes longer than the rest of the smoke run."""
    if quick:
        print("bench_matrix_provider: left out of the quick run (Synapse takes ~10 s to start)")
        return []
    return anyio.run(main, 200)


async def main(count: int) -> list[Figure]:
    with tempfile.TemporaryDirectory() as folder:
        synapse = start_synapse(Path(folder) / "synapse")
        try:
            bot = synapse.register("bench-bot")
            person = synapse.register("bench-person")
            synapse.lift_ratelimit(bot)
            room = synapse.create_room(person, invite=(bot,))
            settings = MatrixSettings.model_validate(
                {
                    "homeserver_url": synapse.base_url,
                    "user_id": bot.user_id,
                    "access_token": bot.access_token,
                    "device_id": bot.device_id,
                }
            )
            await measure(synapse, bot.access_token, settings, room, 20)  # warm up the server
            rate = await measure(synapse, bot.access_token, settings, room, count)
        finally:
            synapse.stop()
    post_floor, edit_floor = rate["floor post"], rate["floor edit"]
    posts, edits = rate["provider post"], rate["provider edit"]
    print(f"calls per figure: {count} (Synapse, SQLite, loopback; interleaved rounds)")
    print(f"floor (bare httpx PUT send):      {post_floor:5.0f} /s  (1.00)")
    print(f"MatrixProvider.post:              {posts:5.0f} /s  ({posts / post_floor:.2f} of floor)")
    print(f"floor (bare httpx PUT m.replace): {edit_floor:5.0f} /s  (1.00)")
    print(f"MatrixProvider.edit:              {edits:5.0f} /s  ({edits / edit_floor:.2f} of floor)")
    return [
        Figure(
            name=f"matrix.{verb}",
            value=rate,
            unit="calls/s",
            floor=base,
            label=f"MatrixProvider.{verb} against Synapse (floor: bare httpx PUT)",
        )
        for verb, rate, base in (("post", posts, post_floor), ("edit", edits, edit_floor))
    ]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    print_table(anyio.run(main, args.calls))
