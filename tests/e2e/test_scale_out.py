"""Three ``chatbridge run`` processes sharing Redis (conversation logs, membership, fleet streams)
and PostgreSQL (the ledger); one is killed with SIGKILL mid-run.

Phase one hands every user turn to every process (as a platform gateway connection would), phase
two to one process at random (as a load balancer would). Every turn must be answered exactly
once (a copy beyond the first only if it carries the ledger's recovery marker), and each
channel's notifications must come from one process at a time, within the channel's budget.
"""

from __future__ import annotations

import json
import random
import re
import secrets
import signal
from collections import Counter, defaultdict
from pathlib import Path

from bridge_core.ledger import is_marked
from bridge_core.provider import SendBudget
from bridge_core.testing.budget import (
    TranscriptEntry,
    check_budget,
    check_edit_spacing,
    max_in_window,
)
from bridge_core.testing.services import require_postgres, require_redis

from .conftest import GatewayProcess, transcript_lines, wait_for

BUDGET = SendBudget(burst=3, per_second=5.0, edit_spacing=0.5)
CHANNELS = ("ops", "dev", "qa")
ECHO = re.compile(r"^echo: (turn \d+) \(")
JITTER = 0.03  # seconds between a grant on Redis's clock and its transcript line


def write_config(path: Path, transcript: Path, redis_url: str, postgres_url: str) -> Path:
    lines = [
        "[profiles.con]",
        'provider = "console"',
        f'settings = {{ transcript = "{transcript}", output = "none", inbound = "-", '
        'inbound_channel = "ops", budget = { burst = 3, per_second = 5.0, edit_spacing = 0.5 } }',
    ]
    for name in CHANNELS:
        lines += ["", f"[channels.{name}]", 'profile = "con"', f'channel_id = "{name}"']
        lines.append("notify = { hold = 0.2 }")
        if name == "ops":
            lines.append('agent = "bridge_core.runtime.agents:echo_agent"')
    lines += ["", "[stores]", f'ledger = "{postgres_url}"', f'membership = "{redis_url}"']
    lines += ["", "[api]", "port = 0", ""]
    path.write_text("\n".join(lines))
    return path


def notifier_hosts(processes: list[GatewayProcess]) -> dict[str, list[int]]:
    hosts: dict[str, list[int]] = {name: [] for name in CHANNELS}
    for index, gw in enumerate(processes):
        for name, detail in gw.get("/healthz").json()["channels"].items():
            if detail["notifier_here"]:
                hosts[name].append(index)
    return hosts


def admitted(processes: list[GatewayProcess]) -> int:
    total = 0
    for gw in processes:
        for line in gw.get("/metrics").text.splitlines():
            if line.startswith('chatbridge_turns_admitted_total{channel="ops"}'):
                total += int(float(line.split()[-1]))
    return total


Write = tuple[float, str, dict[str, object]]  # (at, process name, transcript line)


def start_three(
    tmp_path: Path, gateways: list[GatewayProcess], *, redis_url: str, postgres_url: str
) -> list[GatewayProcess]:
    """Processes a, b and c on one Redis and one PostgreSQL, each notifier placed on one."""
    prefix = f"e2e{secrets.token_hex(4)}"
    args = [
        "--key-prefix", prefix, "--ledger-table-prefix", f"{prefix}_", "--ledger-lease", "2",
        "--ledger-sweep-interval", "0.5", "--settle", "0.5", "--heartbeat", "0.5",
    ]  # fmt: skip
    processes = []
    for name in "abc":
        config = write_config(
            tmp_path / f"{name}.toml", tmp_path / f"t-{name}.jsonl", redis_url, postgres_url
        )
        workdir = tmp_path / name
        workdir.mkdir()
        gw = GatewayProcess(config, workdir, args=args, stdin=True)
        gateways.append(gw)
        processes.append(gw.start(wait=False))
    for gw in processes:
        gw.start_wait()
    wait_for(
        lambda: all(len(h) == 1 for h in notifier_hosts(processes).values()),
        what="each channel's notifier placed on one gateway",
    )
    return processes


def send_turn(i: int, to: list[GatewayProcess]) -> None:
    line = json.dumps({"id": f"u{i}", "text": f"turn {i}", "author": f"user{i % 5}"})
    for gw in to:
        gw.say(line)


def post_events(batch: int, to: GatewayProcess) -> None:
    events = [
        {"kind": "AgentSpawned", "agent": f"g{batch}-{k}", "workspace": f"w{k % 2}"}
        for k in range(3)
    ]
    events += [{"kind": "StatusChanged", "agent": f"g{batch}-0", "status": "busy"}]
    if batch > 0:
        events += [
            {"kind": "AgentFinished", "agent": f"g{batch - 1}-{k}", "outcome": "done"}
            for k in range(3)
        ]
    assert to.post("/v1/events", events).status_code == 202


def kill_the_ops_host(tmp_path: Path, processes: list[GatewayProcess]) -> int:
    """SIGKILL the process hosting ops's notifier once it has notified there; its index."""
    # A member whose heartbeat was starved rejoins with a new settle delay, during which the
    # channel has no host (never two): read the host when there is exactly one.
    victim_index: int = wait_for(
        lambda: (lambda h: [h[0]] if len(h) == 1 else None)(notifier_hosts(processes)["ops"]),
        what="one host for ops",
    )[0]
    # Kill it only once it has notified "ops" (the first post waits out the 2 s hold), so the
    # takeover is of a channel it was really writing to, not of one it never touched.
    wait_for(
        lambda: any(
            line["channel"] == "ops"
            and line["op"] != "error"
            and not ECHO.search(line["text"] or "")
            for line in transcript_lines(tmp_path / f"t-{'abc'[victim_index]}.jsonl")
        ),
        what="the victim's first notification in ops",
    )
    processes[victim_index].kill()  # mid-run: turns may be in flight, and it hosts a notifier
    return victim_index


def answers(tmp_path: Path) -> Counter[str]:
    """How many times each turn was answered, across the three transcripts."""
    found: Counter[str] = Counter()
    for name in "abc":
        for line in transcript_lines(tmp_path / f"t-{name}.jsonl"):
            if line["op"] == "post":
                text = line["text"]
                body = text.split("\n", 1)[1] if is_marked(text) else text
                match = ECHO.match(body)
                if match:
                    found[match.group(1)] += 1
    return found


def transcripts(
    tmp_path: Path,
) -> tuple[Counter[str], Counter[str], dict[str, list[Write]], dict[str, list[Write]]]:
    """The answers, plain and marked, by turn; the notifications by channel; and every write
    by channel."""
    unmarked: Counter[str] = Counter()
    marked: Counter[str] = Counter()
    writes: dict[str, list[Write]] = defaultdict(list)
    every: dict[str, list[Write]] = defaultdict(list)
    for name in "abc":
        for line in transcript_lines(tmp_path / f"t-{name}.jsonl"):
            text = line["text"] or ""
            body = text.split("\n", 1)[1] if is_marked(text) else text
            match = ECHO.match(body)
            if line["op"] in ("post", "edit", "error"):
                every[line["channel"]].append((line["at"], name, line))
            if match and line["op"] == "post":
                (marked if is_marked(text) else unmarked)[match.group(1)] += 1
            elif line["op"] in ("post", "edit", "error"):
                writes[line["channel"]].append((line["at"], name, line))
    return unmarked, marked, writes, every


def as_entries(channel: str, writes: list[Write]) -> list[TranscriptEntry]:
    return [
        TranscriptEntry(
            t=at, op=str(line["op"]), channel=channel,
            message_id=line["message_id"], text=str(line["text"]),  # type: ignore[arg-type]
        )
        for at, _, line in sorted(writes, key=lambda w: w[0])
    ]  # fmt: skip


def check_notifications(
    channel: str, writes: list[Write], every: list[Write], *, victim: str
) -> None:
    """One process at a time notified ``channel``, never back; within the budget, alone and
    with every process's replies together."""
    timeline = sorted(writes, key=lambda w: w[0])
    assert timeline, f"channel {channel} got no notifications"
    order = [name for _, name, _ in timeline]
    runs = [name for k, name in enumerate(order) if k == 0 or order[k - 1] != name]
    assert len(runs) == len(set(runs)) <= 2, f"{channel} notified by {runs}"
    if len(runs) == 2:
        assert runs[0] == victim
    if channel == "ops":  # its host was the victim: a survivor took the channel over
        assert runs[0] == victim and len(runs) == 2, runs
    entries = as_entries(channel, timeline)
    # Every send is granted on Redis's clock (ADR 0055) and written a round trip later on
    # the process's, so the budget holds to the scheduling jitter between the two here (up to
    # 15 ms seen with the machine's two cores loaded), not to the microsecond; a real overdraw
    # is a whole token (200 ms at this budget's 5/s).
    assert check_budget(entries, BUDGET, tolerance=JITTER) == []
    assert check_edit_spacing(entries, BUDGET.edit_spacing) == []
    # Replies and notifications of every process together: one budget shared through Redis.
    together = as_entries(channel, every)
    peak = max_in_window([e.t for e in together], 1.0)
    print(f"{channel}: {len(together)} writes from every process, at most {peak} in 1 s")
    assert check_budget(together, BUDGET, tolerance=JITTER) == []


def test_three_gateways_one_killed(tmp_path: Path, gateways: list[GatewayProcess]) -> None:
    redis_url, postgres_url = require_redis(), require_postgres()
    rng = random.Random(7)
    processes = start_three(tmp_path, gateways, redis_url=redis_url, postgres_url=postgres_url)
    # phase one: every turn to every process; events to any of them
    for i in range(12):
        send_turn(i, processes)
        if i % 3 == 0:
            post_events(i // 3, rng.choice(processes))
    wait_for(lambda: admitted(processes) == 12, what="the first turns admitted")
    victim_index = kill_the_ops_host(tmp_path, processes)
    victim = processes[victim_index]
    survivors = [gw for gw in processes if gw is not victim]
    wait_for(lambda: _placed_on(survivors), what="the victim's channels placed on a survivor")
    # phase two: each turn to one surviving process at random; events keep flowing
    for i in range(12, 24):
        send_turn(i, [rng.choice(survivors)])
        if i % 3 == 0:
            post_events(i // 3, rng.choice(survivors))
    post_events(8, survivors[0])  # finish the last batch of agents

    wait_for(lambda: len(answers(tmp_path)) == 24, timeout=40, what="every turn answered")
    for gw in survivors:
        gw.signal(signal.SIGTERM)
    assert [gw.wait(30) for gw in survivors] == [0, 0]

    # every turn answered exactly once, or again only under the recovery marker
    unmarked, marked, writes, every = transcripts(tmp_path)
    assert sorted(unmarked | marked) == sorted(f"turn {i}" for i in range(24))
    assert max(unmarked.values()) == 1, f"a turn answered twice without the marker: {unmarked}"
    print(f"turns answered: {sum(unmarked.values())} plain, {sum(marked.values())} marked")

    # notifications: one process at a time per channel, never back; within the budget
    for channel in CHANNELS:
        check_notifications(channel, writes[channel], every[channel], victim="abc"[victim_index])


def _placed_on(survivors: list[GatewayProcess]) -> bool:
    return all(len(h) == 1 for h in notifier_hosts(survivors).values())
