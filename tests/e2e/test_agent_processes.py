"""Agent processes on the SDK (tests/e2e/agent_worker.py) answering a person's turns that arrive as
signed Slack Events posts, against ``chatbridge run`` processes: one gateway (SQLite), and two
gateways sharing Redis (logs, membership) and PostgreSQL (the ledger), with agents connected to
either. While the turns flow, agents are SIGKILLed and restarted, closed gracefully (SIGTERM) and
new ones join.

Every turn is answered, counted at the fake Slack. Every delivery of a turn to more than one
connection is classified into a documented window (docs/agent-protocol.md, "Guarantees"):

- killed-in-flight: the first connection's process was SIGKILLed before its answer was acked
  (the member expired; the turn moved at the expiry);
- closed-in-flight: the first connection closed gracefully before answering (the turn moved at
  its leave);
anything else is unclassified and fails the test; in particular a join never causes one.
"""

from __future__ import annotations

import json
import os
import random
import secrets
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from bridge_core.testing.services import require_postgres, require_redis

from .conftest import GatewayProcess, wait_for

pytest.importorskip("bridge_slack")

from bridge_slack.testing import FakeSlack, event_callback, message_event, signed_headers


@pytest.fixture
def fake_slack(start_fake: Callable[[FakeSlack], FakeSlack]) -> FakeSlack:
    return start_fake(FakeSlack())


WORKER = Path(__file__).with_name("agent_worker.py")
TOKEN = "agent-process-token"
SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
CHANNEL = "C0GENERAL"
TIMINGS = ["--settle", "0.3", "--heartbeat", "0.3", "--grace", "3"]


def write_config(path: Path, fake: FakeSlack, *, ledger: str, membership: str) -> Path:
    path.write_text(
        "\n".join(
            [
                "[profiles.team]",
                'provider = "slack"',
                'budget = { preset = "slack", per_second = 50.0, burst = 50, edit_spacing = 0.1 }',
                "[profiles.team.settings]",
                'bot_token = { env = "SLACK_BOT_TOKEN" }',
                'signing_secret = { env = "SLACK_SIGNING_SECRET" }',
                f'api_base_url = "{fake.api_url}"',
                f'bot_user_id = "{fake.bot_user_id}"',
                "",
                "[channels.ops]",
                'profile = "team"',
                f'channel_id = "{CHANNEL}"',
                'agent_group = "support"',
                'kinds = ["AgentFinished"]',
                "",
                "[stores]",
                f'ledger = "{ledger}"',
                f'membership = "{membership}"',
                "",
                "[api]",
                "port = 0",
                'token = { env = "AGENT_API_TOKEN" }',
                "",
            ]
        )
    )
    return path


@dataclass
class Agent:
    name: str
    url: str
    log: Path
    process: subprocess.Popen[bytes]
    fate: str = "alive"  # alive, killed, closed


@dataclass
class Fleet:
    workdir: Path
    urls: list[str]
    rng: random.Random
    agents: list[Agent] = field(default_factory=list)
    started: int = 0
    joins_while_serving: int = 0

    def start(self) -> Agent:
        self.started += 1
        name = f"agent{self.started}"
        url = self.rng.choice(self.urls)
        log = self.workdir / f"{name}.jsonl"
        with (self.workdir / f"{name}.err").open("wb") as err:  # the child keeps its own handle
            process = subprocess.Popen(
                [
                    sys.executable,
                    str(WORKER),
                    url,
                    TOKEN,
                    name,
                    str(log),
                    str(self.rng.randrange(1 << 30)),
                ],
                stdout=subprocess.DEVNULL,
                stderr=err,
                env={**os.environ, "CHATBRIDGE_LOAD_PLUGINS": ""},
            )
        agent = Agent(name, url, log, process)
        self.agents.append(agent)
        return agent

    def wait_hello(self, agent: Agent) -> None:
        wait_for(
            lambda: any(r["event"] == "hello" for r in records(agent.log)),
            timeout=20,
            what=f"{agent.name}'s hello",
        )

    @property
    def alive(self) -> list[Agent]:
        return [a for a in self.agents if a.fate == "alive"]

    def chaos(self) -> str:
        """One random change of the fleet: kill and restart, close and replace, or a join."""
        alive = self.alive
        action = self.rng.choice(["kill", "close", "join"] if len(alive) > 2 else ["join"])
        if action == "join" and len(alive) >= 5:
            action = "kill"
        if action == "kill":
            victim = self.rng.choice(alive)
            victim.process.send_signal(signal.SIGKILL)
            victim.process.wait()
            victim.fate = "killed"
        elif action == "close":
            victim = self.rng.choice(alive)
            victim.process.send_signal(signal.SIGTERM)
            victim.fate = "closed"
        if action in ("kill", "close") or len(alive) < 5:
            self.start()
            self.joins_while_serving += 1
        return action

    def stop_all(self) -> None:
        for agent in self.agents:
            if agent.process.poll() is None:
                agent.process.kill()
                agent.process.wait()


def records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def post_turn(http: httpx.Client, url: str, i: int) -> None:
    ts = f"{1_800_000_000 + i}.{i:06d}"
    event = message_event(channel=CHANNEL, text=f"turn {i}", user=f"U0P{i % 12:02d}", ts=ts)
    body = event_callback(event, event_id=f"Ev{secrets.token_hex(5)}{i:05d}")
    response = http.post(
        f"{url}/slack/events", content=body, headers=signed_headers(SIGNING_SECRET, body)
    )
    assert response.status_code == 200, response.text


@dataclass
class Outcome:
    turns: int
    answered: int
    platform_duplicates: int
    deliveries: int
    extra: Counter[str]
    actions: Counter[str]
    agents_started: int
    cross_gateway: int  # deliveries to an agent on another gateway than the turn was posted to

    def report(self) -> str:
        return (
            f"{self.turns} turns, {self.answered} answered at the platform, "
            f"{self.platform_duplicates} duplicate replies; {self.deliveries} deliveries to "
            f"agents, extra: {dict(self.extra)}; fleet: {dict(self.actions)}, "
            f"{self.agents_started} agent processes; {self.cross_gateway} deliveries through "
            "another gateway than the one the turn was posted to"
        )


def run_scenario(
    tmp_path: Path,
    fake: FakeSlack,
    gateways: list[GatewayProcess],
    *,
    ledger: str,
    membership: str,
    count: int,
    gateway_count: int,
    seed: int,
    extra_args: list[str],
) -> Outcome:
    rng = random.Random(seed)
    env = {
        "CHATBRIDGE_LOAD_PLUGINS": "bridge-slack",
        "SLACK_BOT_TOKEN": fake.token,
        "SLACK_SIGNING_SECRET": SIGNING_SECRET,
        "AGENT_API_TOKEN": TOKEN,
    }
    started = []
    for index in range(gateway_count):
        workdir = tmp_path / f"gw{index}"
        workdir.mkdir()
        config = write_config(
            tmp_path / f"gw{index}.toml", fake, ledger=ledger, membership=membership
        )
        gw = GatewayProcess(config, workdir, args=[*TIMINGS, *extra_args], env=env)
        gateways.append(gw)
        started.append(gw.start(wait=False))
    for gw in started:
        gw.start_wait()
    urls = [gw.url.replace("http://", "ws://") + "/v1/agents" for gw in started]
    fleet = Fleet(tmp_path, urls, rng)
    actions: Counter[str] = Counter()
    admitted_at: dict[str, str] = {}  # turn text -> the socket URL of the gateway it was posted to
    try:
        for agent in [fleet.start() for _ in range(3)]:
            fleet.wait_hello(agent)
        time.sleep(0.4)  # the first members' settle (0.3 s): not needed for correctness
        with httpx.Client(timeout=10) as http:
            for i in range(count):
                target = rng.choice(started)
                admitted_at[f"turn {i}"] = target.url.replace("http://", "ws://") + "/v1/agents"
                post_turn(http, target.url, i)
                if i % 5 == 4:
                    actions[fleet.chaos()] += 1
                time.sleep(0.05)

        def answers() -> Counter[str]:
            found: Counter[str] = Counter()
            for text in fake.texts(CHANNEL):
                if text.startswith("answer: turn "):
                    found[text.removeprefix("answer: ")] += 1
            return found

        wanted = {f"turn {i}" for i in range(count)}
        wait_for(
            lambda: wanted <= set(answers()),
            timeout=40,
            what="every turn answered at the fake Slack",
        )
        time.sleep(0.5)  # a late duplicate would show now (the count is checked below)
        answered = answers()
    finally:
        fleet.stop_all()
    # classify every delivery beyond the first of each turn
    fates = {agent.name: agent.fate for agent in fleet.agents}
    delivered: dict[str, list[dict[str, Any]]] = defaultdict(list)
    acked: set[tuple[str, str]] = set()
    for agent in fleet.agents:
        for record in records(agent.log):
            if record["event"] == "turn":
                delivered[record["text"]].append(record)
            elif record["event"] == "ack":
                acked.add((agent.name, record["turn"]))
    urls_of = {agent.name: agent.url for agent in fleet.agents}
    cross = sum(
        1 for text, ds in delivered.items() for d in ds if urls_of[d["name"]] != admitted_at[text]
    )
    extra: Counter[str] = Counter()
    for text, deliveries in delivered.items():
        deliveries.sort(key=lambda r: r["at"])
        for earlier in deliveries[:-1]:
            fate = fates[earlier["name"]]
            if (earlier["name"], earlier["turn"]) in acked:
                extra["unclassified (answered, then delivered again)"] += 1
            elif fate == "killed":
                extra["killed-in-flight"] += 1
            elif fate == "closed":
                extra["closed-in-flight"] += 1
            else:
                extra[f"unclassified ({text} first to live {earlier['name']})"] += 1
    return Outcome(
        turns=count,
        answered=sum(1 for t in wanted if answered[t] >= 1),
        platform_duplicates=sum(n - 1 for n in answered.values() if n > 1),
        deliveries=sum(len(d) for d in delivered.values()),
        extra=extra,
        actions=actions,
        agents_started=fleet.started,
        cross_gateway=cross,
    )


def check(outcome: Outcome) -> None:
    print(outcome.report())
    assert outcome.answered == outcome.turns, outcome.report()
    assert outcome.platform_duplicates == 0, outcome.report()
    assert not [k for k in outcome.extra if k.startswith("unclassified")], outcome.report()
    assert outcome.actions["join"] + outcome.actions["kill"] + outcome.actions["close"] >= 5


def test_agent_processes_on_one_gateway(
    tmp_path: Path, fake_slack: FakeSlack, gateways: list[GatewayProcess]
) -> None:
    outcome = run_scenario(
        tmp_path,
        fake_slack,
        gateways,
        ledger=str(tmp_path / "bridge.sqlite3"),
        membership="embedded",
        count=60,
        gateway_count=1,
        seed=11,
        extra_args=[],
    )
    check(outcome)
    assert outcome.cross_gateway == 0  # one gateway


@pytest.mark.redis
@pytest.mark.postgres
def test_agent_processes_across_two_gateways(
    tmp_path: Path, fake_slack: FakeSlack, gateways: list[GatewayProcess]
) -> None:
    redis_url, postgres_url = require_redis(), require_postgres()
    prefix = f"ag{secrets.token_hex(4)}"
    outcome = run_scenario(
        tmp_path,
        fake_slack,
        gateways,
        ledger=postgres_url,
        membership=redis_url,
        count=60,
        gateway_count=2,
        seed=23,
        extra_args=[
            "--key-prefix",
            prefix,
            "--ledger-table-prefix",
            f"{prefix}_",
            "--ledger-lease",
            "2",
        ],
    )
    check(outcome)
    assert outcome.cross_gateway > 0  # turns reach agents through the shared log
