"""``chatbridge simulate``: replay a fleet's event log against a provider's budget, in virtual time.

The real ``ChannelSender`` and ``Notifier`` run on trio's ``MockClock(autojump_threshold=0)``
against the console provider dressed in the chosen provider's capabilities and budget (from its
plugin when installed, otherwise the presets below), so an hour of events takes about a second.

One JSON object per line::

    {"t": 12.5, "kind": "AgentSpawned", "agent": "a1", "workspace": "w1"}
    {"t": 14, "kind": "StatusChanged", "agent": "a1", "workspace": "w1", "status": "testing"}
    {"t": 90, "kind": "AgentFinished", "agent": "a1", "outcome": "done", "cost": 0.3, "turns": 7}
    {"t": 30, "fault": "rate_limited", "retry_after": 5}
    {"t": 40, "fault": "not_found"}
    {"t": 50, "fault": "forbidden"}
    {"t": 60, "reply": "r1", "delta": "The answer "}
    {"t": 61, "reply": "r1", "end": true}

``t`` is seconds from the start, never goes back and stays within ``HORIZON`` (30 days: a longer
replay takes minutes per month of virtual time, and ``1e308`` would never end); a fault makes the
next send at or after ``t`` fail with that error. The log is streamed, never held whole: one pass
checks every line (a bad one is refused with its line number before anything runs: not UTF-8,
not JSON, nested too deeply, longer than ``MAX_LINE_BYTES``, a bad event or ``t``), a second
replays it. Reply lines stream a reply to the channel as an agent would (``simulate_streams``);
the summary says what each reply cost. The optional ``--config`` TOML file holds::

    budget = "teams"            # or a table: { burst = 7, per_hour = 1800 }
    edit = false                # pretend the platform cannot edit
    [notify]
    hold = 2.0
    threshold = 5
    window = 10.0
    kinds = ["AgentSpawned", "AgentFinished"]
    workspaces = ["w1"]
"""

from __future__ import annotations

import json
import math
import random
import statistics
import tempfile
import tomllib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import anyio
import click
import trio
import trio.testing
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from bridge_core.commands import get_plugin_manager
from bridge_core.commands.simulate_streams import (
    ReplyLine,
    ReplySends,
    SimulatedReplies,
    reply_line,
)
from bridge_core.config import (
    BudgetSpec,
    NotifySettings,
    budget_context,
    known_event_kinds,
    resolve_budget,
)
from bridge_core.events import AgentFinished, AgentGone, EventError, FleetEvent, parse_event
from bridge_core.notify import Notifier, NotifyConfig
from bridge_core.plugins import CORE_BUDGET_PRESETS, PluginError
from bridge_core.provider import (
    UNLIMITED_BUDGET,
    Capabilities,
    Forbidden,
    LengthUnit,
    NotFound,
    ProviderError,
    RateLimited,
    SendBudget,
    TransportError,
    Window,
)
from bridge_core.providers.console import ConsoleProvider, ConsoleSettings
from bridge_core.sending import ChannelSender
from bridge_core.testing.budget import (
    check_budget,
    check_edit_spacing,
    max_in_window,
    read_transcript,
)

__all__ = [
    "FALLBACK_BUDGETS",
    "FALLBACK_CAPABILITIES",
    "HORIZON",
    "MAX_LINE_BYTES",
    "SimulationResult",
    "command",
    "iter_log",
    "read_log",
    "run_simulation",
]

PROVIDERS = ("slack", "discord", "teams", "console")
CHANNEL = "simulated"
WAITS_LISTED = 50  # agents listed one by one in the waits table (the longest waits first)
PROGRESS_FROM = 10_000  # lines: below this a run is too quick to need a progress bar
HORIZON = 30 * 86_400.0  # seconds: the latest ``t`` a log may use (ADR 0071)
MAX_LINE_BYTES = 1024 * 1024  # one event line; the gateway's API takes a whole body this big

# Used when a provider's plugin is not installed: copies of what each plugin declares
# (PLATFORMS.md), which tests/simulate/test_simulate_cli.py holds equal to the plugins' own.
FALLBACK_CAPABILITIES: dict[str, Capabilities] = {
    "slack": Capabilities(edit=True, max_length=3900, threads=True, inbound=True, probe=True),
    "discord": Capabilities(
        edit=True, max_length=2000, length_unit=LengthUnit.UTF16, threads=True, probe=True
    ),
    "teams": Capabilities(
        edit=True, max_length=24_000, length_unit=LengthUnit.JSON_ASCII, threads=True
    ),
    "console": Capabilities(edit=True, max_length=4000, threads=True, probe=True),
}
FALLBACK_BUDGETS: dict[str, SendBudget] = {
    "slack": SendBudget.hourly(burst=3, per_hour=3600),
    "discord": SendBudget.hourly(burst=5, per_hour=3600, extra=(Window(5, 5.0),)),
    "teams": SendBudget.hourly(
        burst=7, per_hour=1800, extra=(Window(7, 1.0), Window(8, 2.0), Window(60, 30.0))
    ),
    "console": UNLIMITED_BUDGET,
}


# --------------------------------------------------------------------------- the log


@dataclass(frozen=True, slots=True)
class Fault:
    error: ProviderError


LogItem = tuple[float, FleetEvent | Fault | ReplyLine]


def _fault(data: dict[str, Any]) -> Fault:
    name = data["fault"]
    extra = set(data) - {"t", "fault", "retry_after"}
    if extra:
        raise ValueError(f"unexpected field(s) {', '.join(sorted(extra))} on a fault line")
    if name == "rate_limited":
        retry_after = data.get("retry_after")
        if retry_after is not None and (
            isinstance(retry_after, bool)
            or not isinstance(retry_after, (int, float))
            or not math.isfinite(retry_after)
            or retry_after < 0
        ):
            raise ValueError(f"retry_after must be a number >= 0, got {retry_after!r}")
        return Fault(RateLimited("simulated 429", retry_after=retry_after))
    if "retry_after" in data:
        raise ValueError(f"retry_after only goes with rate_limited, not {name!r}")
    if name == "not_found":
        return Fault(NotFound("simulated: message deleted"))
    if name == "forbidden":
        return Fault(Forbidden("simulated: bot removed from the channel"))
    if name == "transport_error":
        return Fault(TransportError("simulated: 502"))
    raise ValueError(
        f"unknown fault {name!r}; expected rate_limited, not_found, forbidden or transport_error"
    )


def _line(text: str, previous: float) -> LogItem:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    except RecursionError:
        raise ValueError("JSON nested too deeply to read; an event line is a flat object") from None
    except ValueError as exc:  # a number of thousands of digits
        raise ValueError(f"JSON that cannot be read: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"each line must be a JSON object, got {type(data).__name__}")
    if "t" not in data:
        raise ValueError('"t" (seconds from the start) is missing')
    t = data["t"]
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t < 0:
        raise ValueError(f'"t" must be a number >= 0, got {t!r}')
    if t > HORIZON:
        raise ValueError(
            f'"t" is {t:g} s, beyond the {HORIZON:g} s (30 days) a simulation may span; '
            "split the log or shift its times"
        )
    if t < previous:
        raise ValueError(f'"t" goes back in time ({t} after {previous}); sort the log by t')
    if "fault" in data:
        return float(t), _fault(data)
    if "reply" in data:
        return float(t), reply_line(data)
    event_data = {k: v for k, v in data.items() if k != "t"}
    try:
        return float(t), parse_event(event_data)
    except EventError as exc:
        raise ValueError(f"bad event: {exc}") from None


def iter_log(path: Path) -> Iterator[LogItem]:
    """The log's events and faults, read one line at a time (memory stays bounded by the longest
    line); a bad line raises ``click.ClickException`` naming it."""
    previous = 0.0
    with path.open("rb") as file:
        for number, raw in enumerate(iter(lambda: file.readline(MAX_LINE_BYTES + 1), b""), 1):
            try:
                if len(raw) > MAX_LINE_BYTES:
                    raise ValueError(f"longer than {MAX_LINE_BYTES} bytes; one event is far less")
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise ValueError(
                        f"not UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1})"
                    ) from None
                if not text.strip():
                    continue
                item = _line(text, previous)
            except (ValueError, OverflowError) as exc:  # Overflow: an integer past any float
                raise click.ClickException(f"{path}, line {number}: {exc}") from None
            previous = item[0]
            yield item


def read_log(path: Path) -> list[LogItem]:
    """The whole log as a list (small logs, tests); ``iter_log`` streams it."""
    return list(iter_log(path))


# --------------------------------------------------------------------------- the config


class SimulateConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    budget: BudgetSpec | None = None
    edit: bool | None = None
    notify: NotifySettings = Field(default_factory=NotifySettings)
    kinds: list[str] | None = None
    workspaces: list[str] | None = None


def _read_config(path: Path | None) -> SimulateConfig:
    if path is None:
        return SimulateConfig()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise click.ClickException(f"{path}: cannot read the config: {exc}") from None
    except RecursionError:
        raise click.ClickException(f"{path}: nested too deeply to read") from None
    notify = data.get("notify")
    if isinstance(notify, dict):  # kinds and workspaces may sit in [notify] too
        for key in ("kinds", "workspaces"):
            if key in notify:
                data[key] = notify.pop(key)
    try:
        config = SimulateConfig.model_validate(data, context=budget_context(_budget_presets()))
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in error['loc'])}: {error['msg']}" for error in exc.errors()
        )
        raise click.ClickException(f"{path}: {problems}") from None
    if config.kinds is not None:
        unknown = sorted(set(config.kinds) - known_event_kinds())
        if unknown:
            raise click.ClickException(f"{path}: kinds: unknown event kind(s) {unknown}")
    return config


def _budget_presets() -> dict[str, SendBudget]:
    """The presets a ``budget = "..."`` may name: the installed plugins', and the fallbacks of the
    platforms whose plugin is not installed."""
    fallbacks = {name: budget for name, budget in FALLBACK_BUDGETS.items() if name != "console"}
    try:
        return {**fallbacks, **get_plugin_manager().providers.budget_presets}
    except PluginError:
        return {**fallbacks, **CORE_BUDGET_PRESETS}


def _provider_profile(name: str) -> tuple[Capabilities, SendBudget, str]:
    """An installed provider's declared capabilities and budget, else the built-in preset of a
    platform whose plugin is not installed; any other name is a usage error saying which exist."""
    missing = f"no provider named {name!r}"
    try:
        registry = get_plugin_manager().providers
        if name in registry:
            provider_type = registry[name]
            return provider_type.capabilities, provider_type.budget, "its plugin"
        missing = registry.missing_message(name)
    except PluginError:
        pass
    if name in FALLBACK_CAPABILITIES:
        return FALLBACK_CAPABILITIES[name], FALLBACK_BUDGETS[name], "the built-in preset"
    presets = ", ".join(sorted(FALLBACK_CAPABILITIES))
    raise click.BadParameter(
        f"{missing} Built-in presets, usable without their plugin: {presets}.",
        param_hint="'-p' / '--provider'",
    )


# --------------------------------------------------------------------------- running


@dataclass
class SimulationResult:
    posts: int = 0
    edits: int = 0
    errors: int = 0
    largest_burst: int = 0
    peak_hourly: int = 0
    virtual_seconds: float = 0.0
    waits: dict[str, float] = field(default_factory=dict)
    undelivered: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    rate_limit_pauses: int = 0
    healthy: bool = True
    replies: dict[str, ReplySends] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        waits = sorted(self.waits.values())
        return {
            "posts": self.posts,
            "edits": self.edits,
            "errors": self.errors,
            "largest_burst": self.largest_burst,
            "peak_hourly": self.peak_hourly,
            "virtual_seconds": self.virtual_seconds,
            "terminal_waits": dict(sorted(self.waits.items())),
            "terminal_wait_max": waits[-1] if waits else None,
            "terminal_wait_median": statistics.median(waits) if waits else None,
            "undelivered": self.undelivered,
            "violations": self.violations,
            "rate_limit_pauses": self.rate_limit_pauses,
            "healthy": self.healthy,
            "replies": {name: sends.to_json() for name, sends in sorted(self.replies.items())},
        }


def run_simulation(
    items: Iterable[LogItem],
    *,
    capabilities: Capabilities,
    budget: SendBudget,
    notify: NotifyConfig,
    transcript: Path,
    seed: int = 0,
    progress: Progress | None = None,
    total: int | None = None,
    drain_limit: float = 86_400.0,
) -> SimulationResult:
    """Replay ``items`` on virtual time, taking each only when its time comes (an iterator is
    never held whole); the transcript is written to ``transcript``. ``total`` sizes the
    progress bar."""
    result = SimulationResult()
    task = progress.add_task("replaying", total=total) if progress else None
    ended: set[str] = set()  # agents whose terminal event this channel is notified of
    replayed = 0
    replies: SimulatedReplies | None = None

    async def main() -> None:
        nonlocal replayed, replies
        provider = ConsoleProvider(
            ConsoleSettings(transcript=transcript, output="none"), run_prefix="sim"
        )
        provider.capabilities = capabilities
        sender = ChannelSender(provider, channel=CHANNEL, budget=budget, random=random.Random(seed))
        notifier = Notifier(
            CHANNEL,
            sender,
            capabilities=capabilities,
            config=notify,
            escape=provider.escape,
            on_terminal_delivered=result.waits.__setitem__,
        )
        async with anyio.create_task_group() as group:
            group.start_soon(sender.run)
            group.start_soon(notifier.run)
            replies = SimulatedReplies(sender, provider, group)
            await replies.open()
            for index, (t, item) in enumerate(items):
                if t > anyio.current_time():  # simultaneous lines go in without a scheduler pass
                    await anyio.sleep_until(t)
                if isinstance(item, Fault):
                    provider.script_fault(CHANNEL, item.error)
                elif isinstance(item, ReplyLine):
                    replies.handle(item)
                else:
                    notifier.handle(item)
                    if _notifies_an_end(item, notify):
                        ended.add(item.agent)
                if progress is not None and task is not None and index % 1000 == 0:
                    progress.update(task, completed=index)
                replayed = index + 1
            replies.end_all()  # a reply the log never ended ends with it
            with anyio.move_on_after(drain_limit):
                # Virtual time: polling costs nothing and needs no hook in the notifier.
                while not (notifier.idle and sender.idle and replies.idle):  # noqa: ASYNC110
                    await anyio.sleep(1.0)
            result.virtual_seconds = anyio.current_time()
            result.rate_limit_pauses = sender.statistics().rate_limit_pauses
            result.healthy = sender.healthy
            group.cancel_scope.cancel()
        await provider.aclose()

    clock = trio.testing.MockClock(autojump_threshold=0)
    # Ctrl-C only at a checkpoint: raised anywhere, it once broke Trio's cancel scope stack.
    trio.run(main, clock=clock, restrict_keyboard_interrupt_to_checkpoints=True)
    if progress is not None and task is not None:
        progress.update(task, completed=replayed)
    entries = read_transcript(transcript) if transcript.exists() else []
    result.posts = sum(e.op == "post" for e in entries)
    result.edits = sum(e.op == "edit" for e in entries)
    result.errors = sum(e.op == "error" for e in entries)
    times = [e.t for e in entries]
    result.largest_burst = max_in_window(times, 1.0)
    result.peak_hourly = max_in_window(times, 3600.0)
    violations = check_budget(entries, budget) + check_edit_spacing(entries, budget.edit_spacing)
    result.violations = [str(v) for v in violations]
    result.undelivered = sorted(ended - set(result.waits))
    if replies is not None:
        result.replies = replies.sends(entries)
        result.undelivered += sorted(
            f"reply {name}" for name, sends in result.replies.items() if not sends.delivered
        )
    return result


def _notifies_an_end(event: FleetEvent, notify: NotifyConfig) -> bool:
    return (
        isinstance(event, (AgentFinished, AgentGone))
        and event.kind in notify.kinds
        and (notify.workspaces is None or event.workspace in notify.workspaces)
    )


# --------------------------------------------------------------------------- the command


def _print(result: SimulationResult, console: Console, *, title: str) -> None:
    table = Table(title=title, show_header=False)
    table.add_column("what")
    table.add_column("value", justify="right")
    table.add_row("posts", str(result.posts))
    table.add_row("edits", str(result.edits))
    table.add_row("failed sends (scripted faults)", str(result.errors))
    table.add_row("largest burst (sends in 1 s)", str(result.largest_burst))
    table.add_row("peak hourly rate (sends in 3600 s)", str(result.peak_hourly))
    table.add_row("rate-limit pauses", str(result.rate_limit_pauses))
    table.add_row("virtual time", f"{result.virtual_seconds:.1f} s")
    waits = sorted(result.waits.values())
    if waits:
        table.add_row("terminal states delivered", str(len(waits)))
        table.add_row(
            "terminal wait: median / max", f"{statistics.median(waits):.1f} s / {waits[-1]:.1f} s"
        )
    table.add_row("terminal states not delivered", str(len(result.undelivered)))
    table.add_row(
        "budget and spacing",
        "respected" if not result.violations else f"{len(result.violations)} violation(s)",
    )
    console.print(table)
    if result.waits:
        detail = Table(title="how long each terminal state waited (longest first)")
        detail.add_column("agent")
        detail.add_column("wait", justify="right")
        ranked = sorted(result.waits.items(), key=lambda kv: (-kv[1], kv[0]))
        for agent, wait in ranked[:WAITS_LISTED]:
            detail.add_row(agent, f"{wait:.1f} s")
        if len(ranked) > WAITS_LISTED:
            detail.add_row(f"... {len(ranked) - WAITS_LISTED} more", "")
        console.print(detail)
    if result.replies:
        detail = Table(title="sends per streamed reply")
        for column in ("reply", "posts", "edits", "first text after", "final after end"):
            detail.add_column(column, justify="left" if column == "reply" else "right")
        for name, sends in sorted(result.replies.items())[:WAITS_LISTED]:
            detail.add_row(
                name,
                str(sends.posts),
                str(sends.edits),
                "-" if sends.first_text_after is None else f"{sends.first_text_after:.1f} s",
                "-" if sends.final_after is None else f"{sends.final_after:.1f} s",
            )
        console.print(detail)
    for violation in result.violations[:10]:
        console.print(f"violation: {violation}", markup=False)


@click.command("simulate")
@click.argument("events", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "-p",
    "--provider",
    "provider_name",
    default="console",
    show_default=True,
    help=(
        "Whose budget and capabilities to simulate: any installed provider, or one of "
        f"{', '.join(PROVIDERS)} without its plugin."
    ),
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="TOML with budget, edit and [notify] (hold, threshold, window, kinds, workspaces).",
)
@click.option(
    "--transcript",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the console transcript (JSON Lines) here.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the back-off jitter.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def command(
    events: Path,
    provider_name: str,
    config_path: Path | None,
    transcript: Path | None,
    seed: int,
    as_json: bool,
) -> None:
    """Replay EVENTS.jsonl through the real sender and notifier on virtual time.

    One JSON object per line, ``t`` in seconds from the start (never going back):

    \b
      {"t": 12.5, "kind": "AgentSpawned", "agent": "a1", "workspace": "w1"}
      {"t": 14, "kind": "StatusChanged", "agent": "a1", "status": "testing"}
      {"t": 90, "kind": "AgentFinished", "agent": "a1", "outcome": "done",
       "cost": 0.3, "turns": 7}
      {"t": 30, "fault": "rate_limited", "retry_after": 5}
      {"t": 40, "fault": "not_found"}     {"t": 50, "fault": "forbidden"}
      {"t": 60, "reply": "r1", "delta": "The answer "}
      {"t": 61, "reply": "r1", "end": true}

    A fault makes the next send at or after t fail with that error. Reply lines stream a reply
    (its deltas, then its end); the summary gives the sends each reply cost. Prints posts,
    edits, the largest burst, the peak hourly rate and how long each terminal state waited;
    exits 1 if the budget or the edit spacing was broken.
    """
    lines = sum(1 for _ in iter_log(events))  # every line checked before anything runs
    config = _read_config(config_path)
    capabilities, budget, source = _provider_profile(provider_name)
    budget = resolve_budget(config.budget, budget, presets=_budget_presets())
    if config.edit is not None:
        capabilities = replace(capabilities, edit=config.edit)
    notify = NotifyConfig.for_channel(config)
    if transcript is not None:
        transcript.parent.mkdir(parents=True, exist_ok=True)
        transcript.unlink(missing_ok=True)
    console = Console(highlight=False)
    with tempfile.TemporaryDirectory() as folder:
        path = transcript if transcript is not None else Path(folder) / "transcript.jsonl"
        try:
            with Progress(
                console=Console(stderr=True), transient=True, disable=lines < PROGRESS_FROM
            ) as progress:
                result = run_simulation(
                    iter_log(events),
                    capabilities=capabilities,
                    budget=budget,
                    notify=notify,
                    transcript=path,
                    seed=seed,
                    progress=progress,
                    total=lines,
                )
        except (KeyboardInterrupt, BaseExceptionGroup) as interrupted:
            # As `demo` and `run` do: one line and the shell's status for SIGINT, no traceback
            # (the event loop may hand the interrupt back inside an exception group).
            if isinstance(interrupted, BaseExceptionGroup) and (
                interrupted.subgroup(KeyboardInterrupt) is None
            ):
                raise
            click.echo("simulate interrupted; nothing was summarised", err=True)
            raise SystemExit(130) from None
    if as_json:
        payload = result.to_json() | {
            "provider": provider_name,
            "profile_from": source,
            "budget": budget.to_json(),
            "capabilities": capabilities.to_json(),
        }
        click.echo(json.dumps(payload, indent=2))
    else:
        title = f"{events.name} on {provider_name} (budget and capabilities from {source})"
        _print(result, console, title=title)
    if result.violations:
        raise SystemExit(1)
