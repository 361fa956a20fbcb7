"""``chatbridge demo``: the real gateway on embedded defaults, with a simulated fleet.

Nothing to configure: the console provider draws the channel in the terminal (and writes a
transcript), the ledger and the conversation log live in one SQLite file in a fresh folder, and
the agent group has one in-process member. A scripted fleet plays a burst of agents that finishes
(one summary message), a chatty agent (one live message edited in place, at most every 2 s), an
agent that crashes (its own failure post), and a rate-limit pause scripted into the console
provider; an echo agent answers what the user types (or, when standard input is not a terminal,
a couple of scripted user messages).

With ``agent_process=True`` (``chatbridge demo --agent-process``) the echo agent is not in the
gateway: the channel takes connected agents (``agent_group``), the HTTP API listens on a free
loopback port, and ``python -m bridge_core.agent.example`` runs as its own process, connects to
``/v1/agents`` and answers; it is stopped (a graceful leave) before the gateway.
"""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import anyio

from bridge_core import __version__
from bridge_core.config import BridgeConfig, parse_config
from bridge_core.events import parse_event
from bridge_core.hookspecs import ProviderType
from bridge_core.ledger import is_marked, open_store
from bridge_core.plugins import ProviderRegistry, RegisteredProvider
from bridge_core.provider import InboundMessage, RateLimited
from bridge_core.providers import console as console_provider
from bridge_core.providers.console import ConsoleProvider, ConsoleSettings
from bridge_core.runtime.agents import echo_agent
from bridge_core.runtime.gateway import Gateway, GatewayOptions

__all__ = ["DEMO_CHANNEL", "FLEET", "DemoReport", "run_demo"]

log = logging.getLogger("bridge_core.runtime.demo")

DEMO_PROFILE = "demo"
DEMO_CHANNEL = "demo"

Event = dict[str, Any]

# (seconds from the start, the event's JSON form) - the same form POST /v1/events takes
FLEET: list[tuple[float, Event]] = [
    *[
        (0.2 + 0.05 * i, {"kind": "AgentSpawned", "agent": f"build-{i}", "workspace": "web",
                          "title": f"build shard {i}"})
        for i in range(1, 7)
    ],
    (0.5, {"kind": "AgentSpawned", "agent": "chatty", "workspace": "api",
           "title": "refactor the auth module"}),
    *[
        (0.8 + 0.4 * i, {"kind": "StatusChanged", "agent": "chatty", "workspace": "api",
                         "status": status})
        for i, status in enumerate(
            [
                "reading src/auth.py", "planning the change", "editing src/auth.py",
                "editing src/session.py", "running tests 5/40", "running tests 19/40",
                "running tests 33/40", "fixing a failing test", "running tests 40/40",
                "writing the summary",
            ]
        )
    ],
    *[
        (3.0 + 0.4 * i, {"kind": "AgentFinished", "agent": f"build-{i}", "workspace": "web",
                         "outcome": "done", "cost": round(0.03 * i, 2), "turns": 2 + i})
        for i in range(1, 6)
    ],
    (4.0, {"kind": "AgentSpawned", "agent": "migrator", "workspace": "api",
           "title": "migrate the database"}),
    (5.0, {"kind": "StatusChanged", "agent": "migrator", "workspace": "api",
           "status": "applying migration 7 of 12"}),
    (5.5, {"kind": "AgentFinished", "agent": "build-6", "workspace": "web", "outcome": "killed"}),
    (7.5, {"kind": "AgentFinished", "agent": "migrator", "workspace": "api", "outcome": "crashed",
           "cost": 0.41, "turns": 9}),
    (9.0, {"kind": "ToolStarted", "agent": "chatty", "workspace": "api", "tool": "pytest"}),
    (10.5, {"kind": "AgentFinished", "agent": "chatty", "workspace": "api", "outcome": "done",
            "cost": 0.87, "turns": 23}),
]  # fmt: skip

RATE_LIMIT_AT = 6.0
RATE_LIMIT_SECONDS = 2.5
SCRIPTED_USER: list[tuple[float, str]] = [
    (1.0, "hi! is the build green yet?"),
    (8.0, "thanks - what is the migrator doing?"),
]


@dataclass
class DemoReport:
    """What happened, read back from the transcript and the ledger."""

    seconds: float
    data_dir: Path
    transcript: Path
    events: int
    user_messages: int
    ops: Counter[str] = field(default_factory=Counter)
    replies: int = 0
    marked: int = 0
    ledger: dict[str, int] = field(default_factory=dict)

    def render(self) -> str:
        counts = ", ".join(f"{state} {n}" for state, n in sorted(self.ledger.items()) if n)
        return "\n".join(
            [
                f"demo finished after {self.seconds:.1f} s",
                f"  fleet events sent: {self.events}; user messages: {self.user_messages}",
                f"  channel #{DEMO_CHANNEL}: {self.ops['post']} posts, {self.ops['edit']} edits, "
                f"{self.ops['error']} refused sends (the scripted rate limit)",
                f"  replies to people: {self.replies} (marked as possible duplicates: "
                f"{self.marked})",
                f"  ledger rows: {counts or 'none'}",
                f"  transcript: {self.transcript}",
                f"  state (SQLite: ledger, conversation log): {self.data_dir / 'bridge.sqlite3'}",
                "next: write a bridge.toml and run `chatbridge run` (see the README)",
            ]
        )


DEMO_GROUP = "demo-agents"


def demo_config(data_dir: Path, transcript: Path, *, agent_process: bool = False) -> BridgeConfig:
    channel: dict[str, Any] = {"profile": DEMO_PROFILE, "channel_id": DEMO_CHANNEL}
    if agent_process:
        channel["agent_group"] = DEMO_GROUP
    data = {
        "profiles": {
            DEMO_PROFILE: {
                "provider": "console",
                # Slack's pace, written out (its preset is bridge-slack's, not installed here):
                # 3 back to back, then one a second, at most 3,600 in any hour.
                "settings": {
                    "transcript": str(transcript),
                    "budget": {"burst": 3, "per_hour": 3600},
                },
            }
        },
        "channels": {DEMO_CHANNEL: channel},
        "stores": {"ledger": str(data_dir / "bridge.sqlite3")},
        "api": {"host": "127.0.0.1", "port": 0},
    }
    # only the built-in console is needed: loading every installed platform SDK costs seconds
    found: list[ProviderType[Any]] = []
    console_provider.register_providers(found.append)
    registry = ProviderRegistry([RegisteredProvider(t, "bridge-core", __version__) for t in found])
    return parse_config(data, providers=registry)


async def run_demo(
    *,
    seconds: float = 12.0,
    forever: bool = False,
    data_dir: Path | None = None,
    interactive: bool | None = None,
    output: TextIO | None = None,
    stdin: TextIO | None = None,
    agent_process: bool = False,
) -> DemoReport:
    """Run the demo; returns what happened.

    Lines on standard input (typed, or piped) are user messages the echo agent answers; until
    the first one arrives, the scripted user messages play (so an empty or closed stdin still
    shows replies). ``interactive=False`` ignores stdin; ``True`` or ``None`` (the default)
    reads it, and a terminal gets a prompt.
    """
    out = output if output is not None else sys.stdout
    source = stdin if stdin is not None else sys.stdin
    data_dir = data_dir or Path(tempfile.mkdtemp(prefix="chatbridge-demo-"))
    data_dir.mkdir(parents=True, exist_ok=True)
    transcript = data_dir / "transcript.jsonl"
    config = demo_config(data_dir, transcript, agent_process=agent_process)
    profile = config.profiles[DEMO_PROFILE]
    settings = profile.settings
    assert isinstance(settings, ConsoleSettings)
    provider = ConsoleProvider(settings, profile=DEMO_PROFILE, output=out)
    gateway = Gateway(
        config,
        options=GatewayOptions(http=agent_process, settle=0.0, heartbeat=0.5, grace=3.0),
        providers={DEMO_PROFILE: provider},
        agents={} if agent_process else {DEMO_CHANNEL: echo_agent},
    )
    demo = _DemoRun(gateway, provider, out=out, source=source if interactive is not False else None)
    print(
        f"chatbridge demo: a simulated fleet posting to #{DEMO_CHANNEL} through the real gateway"
        + (" (type a message and press Enter to talk to the echo agent)" if demo.prompt else ""),
        file=out,
        flush=True,
    )
    await demo.run(seconds=None if forever else seconds, agent_process=agent_process)
    report = await _report(
        anyio.current_time() - demo.started,
        data_dir,
        transcript,
        events=demo.events_sent,
        users=demo.users,
    )
    print(report.render(), file=out, flush=True)
    return report


class _DemoRun:
    """One run of the demo against ``gateway``: the scripted fleet and user, the lines typed
    on ``source`` (``None``: stdin is ignored), and the counts the report shows."""

    def __init__(
        self,
        gateway: Gateway,
        provider: ConsoleProvider,
        *,
        out: TextIO,
        source: TextIO | None,
    ) -> None:
        self.gateway = gateway
        self.provider = provider
        self.out = out
        self.source = source
        self.prompt = source is not None and source.isatty()
        self.started = anyio.current_time()
        self.users = 0
        self.events_sent = 0
        self.typed_lines = 0

    async def run(self, *, seconds: float | None, agent_process: bool) -> None:
        """Serve the gateway while the script plays, for ``seconds`` (``None``: until
        stopped); returns after the gateway's graceful stop."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._drive, tg, seconds, agent_process)
            await self.gateway.run()  # returns after the graceful stop
            tg.cancel_scope.cancel()

    async def _drive(
        self, tg: anyio.abc.TaskGroup, seconds: float | None, agent_process: bool
    ) -> None:
        gateway = self.gateway
        await gateway.ready.wait()
        agent = await _start_agent_process(gateway, self.out) if agent_process else None
        self.started = anyio.current_time()
        tg.start_soon(self._play)
        if self.source is not None:
            tg.start_soon(self._typed, self.source)
        if seconds is not None:
            await anyio.sleep_until(self.started + seconds)
            if agent is not None:
                await _stop_agent_process(agent)
            gateway.stop()

    async def _say(self, text: str) -> None:
        """A user message in the demo channel, as the console provider would hand it over."""
        if not self.gateway.accepting:
            return
        self.users += 1
        message = InboundMessage(
            message_id=f"demo-{time.time_ns()}-{self.users}",
            channel=DEMO_CHANNEL,
            author="you",
            text=text,
            at=time.time(),
            platform="console",
            profile=DEMO_PROFILE,
        )
        print(f"         #{DEMO_CHANNEL} > you: {text}", file=self.out, flush=True)
        await self.gateway.inbound(DEMO_PROFILE, message)

    async def _play(self) -> None:
        """The script: fleet events, the scripted rate limit, and the scripted user's lines
        (until a real user has spoken)."""
        # (when, what): a fleet event, a user message, or None for the scripted rate limit
        timeline: list[tuple[float, Event | str | None]] = [*FLEET, (RATE_LIMIT_AT, None)]
        timeline += SCRIPTED_USER
        for at, what in sorted(timeline, key=lambda item: item[0]):
            await anyio.sleep_until(self.started + at)
            if not self.gateway.accepting:  # stopped before the script ended (--seconds)
                return
            if what is None:
                self.provider.script_fault(
                    DEMO_CHANNEL,
                    RateLimited("scripted by the demo", retry_after=RATE_LIMIT_SECONDS),
                )
            elif isinstance(what, str):
                if not self.typed_lines:  # a real user has the floor once they have spoken
                    await self._say(what)
            else:
                await self.gateway.accept_events([parse_event(what)])
                self.events_sent += 1

    async def _typed(self, source: TextIO) -> None:
        """Each non-empty line read from ``source``, said by the user."""
        while True:
            line = await anyio.to_thread.run_sync(source.readline, abandon_on_cancel=True)
            if not line:
                return
            if line.strip():
                self.typed_lines += 1
                await self._say(line.strip())


async def _start_agent_process(gateway: Gateway, out: TextIO) -> anyio.abc.Process:
    """``python -m bridge_core.agent.example`` connected to the demo's gateway, once it joined."""
    assert gateway.url is not None
    url = gateway.url.replace("http://", "ws://") + "/v1/agents"
    command = [sys.executable, "-m", "bridge_core.agent.example", url]
    command += ["--group", DEMO_GROUP, "--channel", DEMO_CHANNEL]
    process = await anyio.open_process(command, stdout=subprocess.PIPE, stderr=None)
    assert process.stdout is not None
    with anyio.fail_after(30):
        joined = (await process.stdout.receive()).decode().strip()
    print(f"         {joined}", file=out, flush=True)
    return process


async def _stop_agent_process(process: anyio.abc.Process) -> None:
    process.send_signal(signal.SIGTERM)  # a graceful leave
    with anyio.move_on_after(5) as waited:
        await process.wait()
    if waited.cancelled_caught:
        process.kill()
        await process.wait()
    await process.aclose()


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


async def _report(
    seconds: float, data_dir: Path, transcript: Path, *, events: int, users: int
) -> DemoReport:
    report = DemoReport(
        seconds=seconds,
        data_dir=data_dir,
        transcript=transcript,
        events=events,
        user_messages=users,
    )
    lines: Sequence[str] = await anyio.to_thread.run_sync(_lines, transcript)
    for line in lines:
        entry = json.loads(line)
        report.ops[entry["op"]] += 1
        text = entry.get("text") or ""
        if entry["op"] == "post" and "echo:" in text:
            report.replies += 1
            report.marked += 1 if is_marked(text) else 0
    store = await open_store(data_dir / "bridge.sqlite3")
    try:
        counts = await store.counts_by_state()
        report.ledger = {getattr(s, "value", str(s)): n for s, n in counts.items()}
    finally:
        await store.aclose()
    return report
