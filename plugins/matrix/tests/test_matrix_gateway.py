"""A real ``chatbridge run`` answering a person's messages that arrive by ``/sync`` from the real
Synapse, restarted, and killed with SIGKILL mid-delivery; replies are counted in the room's real
history."""

from __future__ import annotations

import json
import os
import random
import re
import secrets
import signal
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from bridge_matrix.testing import FaultProxy, MatrixUser, Synapse
from bridge_matrix.testing.fixtures import People
from bridge_matrix.testing.gateway import (
    CHATBRIDGE,
    TOKEN_ENV,
    GatewayProcess,
    matrix_config,
    wait_for,
)

from bridge_core.testing import services

ECHO = re.compile(r"echo: (msg-\d+)\b")
# One gateway: no group to settle into, so no settle delay (as the core's e2e runs); the default
# 1 s settle and heartbeat held each start's first reply back some 2 s.
ONE_GATEWAY = ["--settle", "0", "--heartbeat", "0.2"]


@pytest.fixture
def gateways() -> Iterator[list[GatewayProcess]]:
    started: list[GatewayProcess] = []
    yield started
    for gateway in started:
        if gateway.running:
            assert gateway.process is not None
            gateway.process.kill()
            gateway.process.wait()


def answers(synapse: Synapse, people: People, room: str, bot: MatrixUser) -> Counter[str]:
    """How many replies each ``msg-N`` has in the room's history."""
    counts: Counter[str] = Counter()
    for message in synapse.messages_by(people.person, room, bot.user_id):
        found = ECHO.search(message["content"]["body"])
        if found:
            counts[found.group(1)] += 1
    return counts


def fresh_bot(synapse: Synapse, people: People, *, per_second: int) -> tuple[MatrixUser, str]:
    bot = synapse.register()
    room = synapse.create_room(people.person, invite=(bot,))
    synapse.override_ratelimit(bot, per_second=per_second, burst=10)
    return bot, room


def test_chatbridge_run_answers_what_arrives_by_sync_and_resumes_after_a_restart(
    tmp_path: Path, synapse: Synapse, people: People, gateways: list[GatewayProcess]
) -> None:
    bot, room = fresh_bot(synapse, people, per_second=10)
    synapse.send_text(people.person, room, "msg-0 before the gateway ever ran")
    config = matrix_config(
        tmp_path / "bridge.toml",
        homeserver_url=synapse.base_url,
        bot=bot,
        room=room,
        ledger=str(tmp_path / "bridge.sqlite3"),
    )
    gateway = GatewayProcess(config, tmp_path, token=bot.access_token)
    gateways.append(gateway.start())
    gateway.wait_until_receiving()
    synapse.send_text(people.person, room, "msg-1 hello")
    wait_for(
        lambda: answers(synapse, people, room, bot)["msg-1"], timeout=20, what="msg-1's answer"
    )
    assert gateway.stop() == 0
    synapse.send_text(people.person, room, "msg-2 while the gateway was down")
    gateway.start()
    wait_for(
        lambda: answers(synapse, people, room, bot)["msg-2"], timeout=20, what="msg-2's answer"
    )
    synapse.send_text(people.person, room, "msg-3 after the restart")
    wait_for(
        lambda: answers(synapse, people, room, bot)["msg-3"], timeout=20, what="msg-3's answer"
    )
    assert gateway.stop() == 0
    # History from before the first start is not a turn; nothing is answered twice.
    assert answers(synapse, people, room, bot) == {"msg-1": 1, "msg-2": 1, "msg-3": 1}


def test_sigkill_mid_delivery_loses_and_duplicates_nothing(
    tmp_path: Path, synapse: Synapse, people: People, gateways: list[GatewayProcess]
) -> None:
    """A stream of messages is answered while the gateway is SIGKILLed again and again, each
    time with one reply claimed and in flight and the rest of its run's replies queued behind it.

    The gateway reaches the homeserver through ``FaultProxy``, which holds one send of each run
    open: in turn after Synapse has stored the event (the gateway never hears so) and before it
    has seen the request. The kill comes while that send is held, so it hits a delivery every
    time instead of when a guessed moment happens to fall inside one."""
    rng = random.Random(16)
    bot, room = fresh_bot(synapse, people, per_second=4)
    total, kills, sent = 20, 4, 0
    with FaultProxy(synapse.base_url) as proxy:
        config = matrix_config(
            tmp_path / "bridge.toml",
            homeserver_url=proxy.url,
            bot=bot,
            room=room,
            ledger=str(tmp_path / "bridge.sqlite3"),
            budget="{ burst = 3, per_second = 4.0 }",
        )
        gateway = GatewayProcess(config, tmp_path, token=bot.access_token, args=ONE_GATEWAY)
        gateways.append(gateway)
        for run in range(kills):
            gateway.start().wait_until_receiving()
            held = proxy.hold(
                "PUT", "/send/m.room.message/", skip=rng.randint(0, 2), forward=run % 2 == 0
            )
            for _ in range(5):
                synapse.send_text(people.person, room, f"msg-{sent} please answer")
                sent += 1
            assert held.wait(20), f"no send of run {run} reached the proxy ({gateway.log_path})"
            gateway.kill()
            proxy.release_holds()
        assert sent == total
        gateway.start()
        wait_for(
            lambda: len(answers(synapse, people, room, bot)) == total,
            timeout=40,
            what="every message answered",
        )
        gateway.process.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
        gateway.process.wait(20)  # type: ignore[union-attr]
    counts = answers(synapse, people, room, bot)
    lost = [f"msg-{n}" for n in range(total) if counts[f"msg-{n}"] == 0]
    duplicated = {name: n for name, n in counts.items() if n > 1}
    assert lost == [] and duplicated == {}, f"lost {lost}, duplicated {duplicated}"
    # Every kill left its held row claimed by a dead process, so each was sent again; where the
    # held send had reached Synapse, the resend got the same event back by transaction id (the
    # room shows no duplicate above).
    rows = ledger_rows(config)
    extra_attempts = sum(int(row["attempts"]) - 1 for row in rows)  # type: ignore[call-overload]
    assert extra_attempts >= kills, f"{kills} kills mid-send, {extra_attempts} resends: {rows}"
    assert all(row["state"] == "delivered" for row in rows)


def ledger_rows(config: Path) -> list[dict[str, object]]:
    done = subprocess.run(
        [*CHATBRIDGE, "ledger", "-c", str(config), "list", "--json", "--limit", "1000"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "CHATBRIDGE_LOAD_PLUGINS": "bridge-matrix", TOKEN_ENV: "unused"},
    )
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def test_two_gateways_on_redis_and_postgres_answer_every_turn_once(
    tmp_path: Path, synapse: Synapse, people: People, gateways: list[GatewayProcess]
) -> None:
    """Both gateways follow the same room by ``/sync`` (the same bot account), so both admit
    every message; the shared conversation log (Redis) gives each turn one owner and the shared
    ledger (PostgreSQL) one reply."""
    redis_url, postgres_url = services.require_redis(), services.require_postgres()
    prefix = f"mx{secrets.token_hex(4)}"
    bot, room = fresh_bot(synapse, people, per_second=10)
    config = matrix_config(
        tmp_path / "bridge.toml",
        homeserver_url=synapse.base_url,
        bot=bot,
        room=room,
        ledger=postgres_url,
        membership=redis_url,
        budget="{ burst = 5, per_second = 8.0 }",
    )
    args = ["--key-prefix", prefix, "--ledger-table-prefix", f"{prefix}_",
            "--settle", "0.3", "--heartbeat", "0.3"]  # fmt: skip
    for n in range(2):
        workdir = tmp_path / f"gw{n}"
        workdir.mkdir()
        gateway = GatewayProcess(config, workdir, token=bot.access_token, args=args)
        gateways.append(gateway)
        gateway.start().wait_until_receiving()
    total = 12
    for n in range(total):
        synapse.send_text(people.person, room, f"msg-{n} from the person")
    wait_for(
        lambda: len(answers(synapse, people, room, bot)) == total,
        timeout=40,
        what="every turn answered",
    )
    for gateway in gateways:
        assert gateway.stop() == 0
    counts = answers(synapse, people, room, bot)
    assert counts == {f"msg-{n}": 1 for n in range(total)}, counts
