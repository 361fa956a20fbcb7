"""Teams provider overhead: ``python bench/bench_teams_provider.py [--posts N] [--tokens N]``.

Measured in one run against one FakeTeams (real local HTTP, its own thread, its throttling
windows off so the figures are the client's):

- the floor for sends: ``POST /v3/conversations/{id}/activities`` with a bare ``requests``
  session called through ``anyio.to_thread`` (the same library and the same thread hop the
  provider uses, the same JSON body and bearer token);
- ``TeamsProvider.post`` and ``TeamsProvider.edit``: botframework-connector's ConnectorClient
  (msrest serialisation, credentials, error mapping) behind the provider;
- the floor for inbound: ``jwt.decode`` of a Bot Framework token with the key in hand;
- ``TeamsProvider``'s messaging endpoint: key lookup, the full claim checks, activity parsing,
  the conversation reference stored, the message handed to a sink.

Prints rates and each figure's ratio to its floor.
"""

from __future__ import annotations

import argparse
import json
import time

import anyio
import anyio.to_thread
import jwt
import requests
from _figures import Figure, print_table
from bridge_teams import StaticKeys, TeamsProvider, TeamsSettings
from bridge_teams.testing.fake_teams import FakeTeams

from bridge_core import HttpRequest, InboundMessage

CHANNEL = "19:bench@thread.tacv2"


class DictStore:
    def __init__(self) -> None:
        self.data: dict[tuple[str, str], bytes] = {}

    async def get(self, namespace: str, key: str) -> bytes | None:
        return self.data.get((namespace, key))

    async def put(self, namespace: str, key: str, value: bytes) -> None:
        self.data[(namespace, key)] = value

    async def delete(self, namespace: str, key: str) -> None:
        self.data.pop((namespace, key), None)


def settings_for(fake: FakeTeams) -> TeamsSettings:
    return TeamsSettings(
        app_id=fake.app_id,
        app_password=fake.app_password,
        service_url=fake.service_url,
        token_url=fake.token_url,
    )


def fetch_token(fake: FakeTeams) -> str:
    answer = requests.post(
        fake.token_url,
        data={
            "grant_type": "client_credentials",
            "client_id": fake.app_id,
            "client_secret": fake.app_password,
            "scope": "https://api.botframework.com/.default",
        },
        timeout=10,
    )
    return str(answer.json()["access_token"])


async def send_floor(fake: FakeTeams, count: int) -> float:
    token = await anyio.to_thread.run_sync(fetch_token, fake)
    session = requests.Session()
    url = f"{fake.base_url}/v3/conversations/{CHANNEL}/activities"
    headers = {"Authorization": f"Bearer {token}"}

    def one(n: int) -> None:
        body = {
            "type": "message",
            "text": f"floor {n}",
            "textFormat": "markdown",
            "from": {"id": fake.bot_id},
            "conversation": {"id": CHANNEL},
            "channelId": "msteams",
            "serviceUrl": fake.service_url,
        }
        response = session.post(url, json=body, headers=headers, timeout=10)
        assert response.status_code == 201, response.text

    started = time.perf_counter()
    for n in range(count):
        await anyio.to_thread.run_sync(one, n)
    rate = count / (time.perf_counter() - started)
    session.close()
    return rate


async def provider_rates(fake: FakeTeams, count: int) -> tuple[float, float]:
    async with TeamsProvider(settings_for(fake), profile="bench") as provider:
        ref = await provider.post(CHANNEL, "warm up")
        started = time.perf_counter()
        for n in range(count):
            await provider.post(CHANNEL, f"provider {n}")
        posts = count / (time.perf_counter() - started)
        started = time.perf_counter()
        for n in range(count):
            await provider.edit(ref, f"edit {n}")
        edits = count / (time.perf_counter() - started)
    return posts, edits


async def inbound_rates(fake: FakeTeams, count: int, rounds: int = 5) -> tuple[float, float]:
    """(floor, endpoint) requests a second: ``rounds`` alternating rounds of ``count / rounds``
    each, the best round of each kept, so a change of the machine's load during the run moves
    both figures alike (the ratio is what is compared)."""
    token = fake.channel_token()
    public = fake.signing_key.public_key()
    received: list[InboundMessage] = []

    async def sink(message: InboundMessage) -> None:
        received.append(message)

    provider = TeamsProvider(
        settings_for(fake), profile="bench", kv=DictStore(), keys=StaticKeys(fake.jwks())
    )
    (route,) = provider.http_routes(sink)
    body = json.dumps(fake.message_activity(CHANNEL, "hello bridge")).encode()
    request = HttpRequest(
        method="POST",
        path=route.path,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        body=body,
    )
    per_round = max(1, count // rounds)
    floor = rate = 0.0
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(per_round):
            jwt.decode(
                token,
                public,
                algorithms=["RS256"],
                audience=fake.app_id,
                issuer="https://api.botframework.com",
            )
        floor = max(floor, per_round / (time.perf_counter() - started))
        started = time.perf_counter()
        for _ in range(per_round):
            response = await route.handler(request)
            assert response.status == 200
        rate = max(rate, per_round / (time.perf_counter() - started))
    assert len(received) == per_round * rounds
    return floor, rate


def figures(*, quick: bool = False) -> list[Figure]:
    """This module's figures (``bench/_figures.py``); ``quick``: fewer calls."""
    return anyio.run(main, 50, 200) if quick else anyio.run(main, 300, 1000)


async def main(count: int, tokens: int) -> list[Figure]:
    with FakeTeams(windows=None) as fake:
        fake.add_conversation(CHANNEL)
        await send_floor(fake, 20)  # warm up
        base = await send_floor(fake, count)
        posts, edits = await provider_rates(fake, count)
        jwt_floor, inbound = await inbound_rates(fake, tokens)
    print(f"calls per send figure: {count}, inbound requests: {tokens}")
    print(f"floor (bare requests send, thread hop): {base:8.0f} /s  (1.00)")
    print(f"TeamsProvider.post:                     {posts:8.0f} /s  ({posts / base:.2f} of floor)")
    print(f"TeamsProvider.edit:                     {edits:8.0f} /s  ({edits / base:.2f} of floor)")
    print(f"floor (jwt.decode, key in hand):        {jwt_floor:8.0f} /s  (1.00)")
    print(
        f"messaging endpoint (validate + parse):  {inbound:8.0f} /s  "
        f"({inbound / jwt_floor:.2f} of floor)"
    )
    return [
        Figure(
            name="teams.post",
            value=posts,
            unit="calls/s",
            floor=base,
            label="TeamsProvider.post (floor: bare requests send)",
        ),
        Figure(
            name="teams.edit",
            value=edits,
            unit="calls/s",
            floor=base,
            label="TeamsProvider.edit (floor: bare requests send)",
        ),
        Figure(
            name="teams.inbound",
            value=inbound,
            unit="requests/s",
            floor=jwt_floor,
            target=0.5,
            label="messaging endpoint, validate + parse (floor: jwt.decode)",
        ),
    ]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--posts", type=int, default=300)
    parser.add_argument("--tokens", type=int, default=1000)
    args = parser.parse_args()
    print_table(anyio.run(main, args.posts, args.tokens))
