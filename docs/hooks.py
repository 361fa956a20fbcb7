"""mkdocs hooks: the parts of the site that are generated from the code, so they cannot drift.

A page asks for a generated block with a marker on a line of its own::

    <!-- generated: error-table -->
    <!-- generated: budget-presets -->
    <!-- generated: config-reference -->
    <!-- generated: config-error-example -->
    <!-- generated: provider-settings -->
    <!-- generated: adr-index -->
    <!-- generated: readme-commands -->
    <!-- generated: cli-reference -->
    <!-- generated: cli-ledger -->
    <!-- generated: hookspecs -->
    <!-- generated: metrics -->
    <!-- generated: kit-modules -->
    <!-- generated: event-kinds -->
    <!-- generated: notify-examples -->
    <!-- generated: ledger-markers -->
    <!-- generated: ledger-schedule -->

``on_page_markdown`` replaces each marker with markdown rendered from the live objects
(``bridge_core.provider.ERROR_TABLE``, the pydantic config models, the files in ``docs/adr/``,
the hookspecs). An unknown marker, or a generator that fails, is an error: the strict build
fails instead of publishing a page with a hole in it.

Links from a page to a file outside ``docs/`` (an ADR pointing at ``../../bridge_core/x.py``)
cannot resolve in the built site; they are rewritten to the path in code font, so the strict
build does not fail on them and the reader still sees where to look.

Run ``python docs/hooks.py NAME`` to print one generated block.
"""

from __future__ import annotations

import enum
import importlib
import inspect
import json
import posixpath
import re
import sys
import types
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "GENERATORS",
    "adr_index",
    "budget_presets",
    "config_reference",
    "error_table",
    "expand_markers",
    "hookspec_names",
    "hookspec_summary",
    "on_page_markdown",
    "provider_settings",
    "render_model",
]

DOCS_DIR = Path(__file__).resolve().parent
MARKER = re.compile(r"^<!--[ \t]*generated:[ \t]*([a-z][a-z0-9-]*)[ \t]*-->[ \t]*$", re.MULTILINE)
# The top-level model of bridge.toml.
CONFIG_ROOT = "bridge_core.config:BridgeConfig"


# Descriptions for config fields whose model does not carry ``Field(description=...)``.
# ``tests/docs`` fails when a key here no longer names a field, so a note cannot outlive its field;
# a description added to the model itself wins over the note.
FIELD_NOTES: dict[str, str] = {
    "BridgeConfig.profiles": "Bot profiles by name: a provider plus its credentials and settings. "
    "Several profiles may use one provider (two Slack apps).",
    "BridgeConfig.channels": "Channels by name: where notifications and replies go.",
    "BridgeConfig.stores": "Where state lives: the ledger and the conversation log.",
    "BridgeConfig.api": "The gateway's HTTP API.",
    "BridgeConfig.notify": "Notification timing for every channel; a channel's own `notify` "
    "table overrides it key by key.",
    "ProfileConfig.provider": "The provider's name as `chatbridge providers` lists it "
    "(`console`, `slack`, `discord`, `teams`, ...).",
    "ProfileConfig.settings": "The provider's own settings, validated by its settings model "
    '(see [Provider settings](#provider-settings)). Secrets as `{ env = "NAME" }`.',
    "ProfileConfig.budget": "Overrides the provider's send budget: a preset name (`slack`, "
    "`discord`, `teams`, `unlimited`) or a table.",
    "ChannelConfig.profile": "The profile (bot) that posts here.",
    "ChannelConfig.channel_id": "The platform's id of the channel (Slack `C0123456`, a Discord "
    "channel snowflake, a Teams conversation id).",
    "ChannelConfig.thread": "Post notifications into this thread instead of the channel.",
    "ChannelConfig.kinds": "Fleet event kinds to notify about; all notifying kinds when absent.",
    "ChannelConfig.workspaces": "Only events from these workspaces; all when absent.",
    "ChannelConfig.agent": "The agent that answers people here, as `package.module:function` "
    "(an async callable); no replies when absent.",
    "ChannelConfig.notify": "This channel's notification timing (overrides `[notify]`).",
    "NotifySettings.hold": "Seconds a new agent's first post waits, to tell a lone agent from "
    "a burst.",
    "NotifySettings.threshold": "Spawns within the hold (one channel and workspace) that share "
    "one summary message.",
    "NotifySettings.window": "Seconds after a summary's latest member within which a new spawn "
    "joins it.",
    "StoresConfig.ledger": "A SQLite file (relative to the config file's folder) or a "
    "`postgresql://` URL for several hosts.",
    "StoresConfig.membership": "`embedded` (one process) or a `redis://` URL for several hosts.",
    "StoresConfig.delivery_ledger": "`false` turns the delivery ledger off: replies in flight "
    "are lost on a crash (see the ledger concepts page).",
    "ApiConfig.host": "Address to listen on; beyond loopback a `token` is required.",
    "ApiConfig.port": "Port to listen on.",
    "ApiConfig.token": 'Bearer token for `/v1/*` and `/metrics`, as `{ env = "NAME" }`.',
    "ApiConfig.max_body_bytes": "Largest request body accepted.",
    "BudgetNumbers.preset": "A preset to start from; the other keys replace its numbers.",
    "BudgetNumbers.burst": "Sends allowed at once (the token bucket's size).",
    "BudgetNumbers.per_second": "Refill rate of the bucket.",
    "BudgetNumbers.per_hour": "Refill rate as sends an hour; also caps any hour at this many.",
    "BudgetNumbers.windows": "Extra sliding windows: at most `limit` sends in any `seconds`.",
    "BudgetNumbers.edit_spacing": "Minimum seconds between two edits of one message.",
    "WindowSpec.limit": "Sends allowed in the window.",
    "WindowSpec.seconds": "The window's length.",
}


# --------------------------------------------------------------------------- small helpers


def _cell(text: str) -> str:
    """Make text safe inside a markdown table cell."""
    return " ".join(text.split()).replace("|", "\\|")


def _first_paragraph(doc: str | None) -> str:
    if not doc:
        return ""
    paragraph = inspect.cleandoc(doc).split("\n\n", 1)[0]
    # reStructuredText literals read as markdown code.
    return " ".join(paragraph.split()).replace("``", "`")


def _number(value: float) -> str:
    return f"{value:,.0f}" if value >= 1000 else f"{value:g}"


def _type_name(annotation: Any) -> str:
    """A readable name for a type annotation: ``str | None``, ``dict[str, Profile]``."""
    if annotation is type(None):
        return "None"
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return " | ".join(repr(arg) for arg in typing.get_args(annotation))
    if origin is typing.Annotated:
        return _type_name(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(arg) for arg in typing.get_args(annotation))
    if origin is not None:
        args = typing.get_args(annotation)
        base = getattr(origin, "__name__", str(origin))
        return f"{base}[{', '.join(_type_name(arg) for arg in args)}]" if args else base
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


def _models_in(annotation: Any) -> Iterator[type[Any]]:
    """The pydantic models mentioned anywhere in an annotation."""
    from pydantic import BaseModel

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
        return
    for arg in typing.get_args(annotation):
        yield from _models_in(arg)


def _toml_value(value: Any) -> str:
    """A default as it would be written in TOML."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    if isinstance(value, dict):
        if not value:
            return "{}"
        return "{ " + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + " }"
    return repr(value)


def _default_text(field: Any) -> str:
    from pydantic import BaseModel
    from pydantic_core import PydanticUndefined

    if field.is_required():
        return "**required**"
    if field.default_factory is not None:
        try:
            value = field.default_factory()
        except TypeError:  # a factory that takes the validated data
            return "computed"
    else:
        value = field.default
    if value is PydanticUndefined:
        return "**required**"
    if value is None:
        return "not set"
    if isinstance(value, BaseModel):
        return "the table's defaults"
    if isinstance(value, enum.Enum):
        value = value.value
    return f"`{_toml_value(value)}`"


def _without_none(annotation: Any) -> Any:
    """``X | None`` is ``X``; any other annotation is itself."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        members = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        if len(members) == 1:
            return members[0]
    return annotation


def _display_type(annotation: Any) -> str:
    """The type as a config author reads it: secrets and free tables named as such."""
    if annotation is Any:
        return "table"
    name = _type_name(annotation)
    if name.endswith(" | None"):
        name = name[: -len(" | None")]
    return re.sub(r"\b(Secret|SecretStr)\b", 'secret ({ env = "NAME" })', name)


def render_model(
    root: type[Any],
    *,
    heading_level: int = 3,
    key_prefix: str = "",
    notes: Mapping[str, str] | None = None,
) -> str:
    """Markdown tables for a pydantic model and every model reachable from its fields.

    Each model gets a heading (the TOML key paths where it appears) and a table: key, type,
    default, description. A field's description comes from ``Field(description=...)``, else from
    ``notes`` (keyed ``"Model.field"``, default ``FIELD_NOTES``); a model's from its docstring.
    Fields marked ``exclude`` are filled in after loading and are not keys of the file.
    """
    notes = FIELD_NOTES if notes is None else notes
    # Breadth first: every path where each model appears, in the order a reader meets them.
    paths: dict[type[Any], list[str]] = {root: [key_prefix]}
    queue = [root]
    while queue:
        model = queue.pop(0)
        path = paths[model][0]
        for name, field in model.model_fields.items():
            if field.exclude:
                continue
            key = field.alias or name
            origin = typing.get_origin(_without_none(field.annotation))
            suffix = ".<name>" if origin is dict else ("[]" if origin is list else "")
            for child in _models_in(field.annotation):
                child_path = f"{path + '.' if path else ''}{key}{suffix}"
                if child not in paths:
                    paths[child] = [child_path]
                    queue.append(child)
                elif child_path not in paths[child]:
                    paths[child].append(child_path)
    out: list[str] = []
    for model, where in paths.items():
        if where == [""]:
            title = "Top level"
        else:
            title = ", ".join(f"`[[{p[:-2]}]]`" if p.endswith("[]") else f"`[{p}]`" for p in where)
        out.append(f"{'#' * heading_level} {title}\n")
        summary = _first_paragraph(model.__doc__)
        if summary:
            out.append(f"{summary}\n")
        out.append("| key | type | default | description |")
        out.append("|---|---|---|---|")
        for name, field in model.model_fields.items():
            if field.exclude:
                continue
            key = field.alias or name
            description = field.description or notes.get(f"{model.__name__}.{name}", "")
            out.append(
                f"| `{key}` | `{_cell(_display_type(field.annotation))}` | "
                f"{_cell(_default_text(field))} | {_cell(description)} |"
            )
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def _config_root() -> type[Any]:
    module_name, _, attribute = CONFIG_ROOT.partition(":")
    return getattr(importlib.import_module(module_name), attribute)  # type: ignore[no-any-return]


def config_reference() -> str:
    """Every key of ``bridge.toml``, from the config models."""
    return render_model(_config_root())


def provider_settings() -> str:
    """The ``settings`` table of each provider installed where the site is built."""
    from bridge_core.plugins import create_plugin_manager

    out: list[str] = []
    for entry in create_plugin_manager().providers.entries():
        provider = entry.type
        out.append(f"### `{provider.name}`\n")
        origin = f"`{entry.distribution}` {entry.version}"
        description = _first_paragraph(provider.description).rstrip(".")
        description = f"{description[:1].upper()}{description[1:]}. " if description else ""
        out.append(f"{description}From {origin}.\n")
        body = render_model(provider.settings_model, heading_level=4, key_prefix="settings")
        # Drop the first heading: the provider's heading above stands for it.
        out.append(body.split("\n", 1)[1].lstrip("\n"))
    return "\n".join(out)


def config_error_example() -> str:
    """What ``ConfigError`` says about files with a misspelled key, provider and profile."""
    from bridge_core.config import ConfigError, parse_config

    broken_files = (
        {"channels": {"ops": {"profile": "ops", "channel_id": "C0123456", "colour": "red"}}},
        {
            "profiles": {"ops-slack": {"provider": "slak", "settings": {}}},
            "channels": {"ops": {"profile": "ops-slak", "channel_id": "C0123456"}},
        },
    )
    messages = []
    for data in broken_files:
        try:
            parse_config(data, path=Path("bridge.toml"), environ={})
        except ConfigError as error:
            messages.append(str(error))
        else:
            raise AssertionError(f"this example config was expected not to validate: {data}")
    return "```\n" + "\n".join(messages) + "\n```\n"


def error_table() -> str:
    """``bridge_core.provider.ERROR_TABLE`` as a markdown table."""
    from bridge_core.provider import ERROR_TABLE

    rows = [
        "| error | is a | meaning | the notifier | the ledger |",
        "|---|---|---|---|---|",
    ]
    for reading in ERROR_TABLE:
        base = reading.error.__mro__[1].__name__
        rows.append(
            f"| `{reading.error.__name__}` | `{base}` | {_cell(reading.meaning)} | "
            f"{_cell(reading.notifier.value)} | {_cell(reading.ledger.value)} |"
        )
    rows.append("")
    rows.append(
        "An error a provider raises that is not one of these (it should not happen) is read as "
        "the last row, transient, by `reading_for`."
    )
    return "\n".join(rows) + "\n"


def budget_presets() -> str:
    """``bridge_core.provider.BUDGET_PRESETS`` as a table."""
    from bridge_core.provider import BUDGET_PRESETS

    rows = [
        "| preset | burst | refill per second | sliding windows | edit spacing |",
        "|---|---|---|---|---|",
    ]
    for name, budget in BUDGET_PRESETS.items():
        windows = (
            ", ".join(f"{w.limit:,} in {_number(w.seconds)} s" for w in budget.windows) or "none"
        )
        rows.append(
            f"| `{name}` | {budget.burst:,} | {_number(budget.per_second)} | {windows} | "
            f"{budget.edit_spacing:g} s |"
        )
    return "\n".join(rows) + "\n"


def _adr_title(path: Path) -> str:
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# "):
            # "0001. Title", "ADR 0001: Title" and "ADR-0001 - Title" all read as "Title".
            return re.sub(r"^(ADR[- ]?)?\d{4}[.:\s-]*", "", line[2:].strip()) or path.stem
    return path.stem


ADR_FILE = re.compile(r"^\d{4}-.+\.md$")


def adr_index(names: Iterable[str] | None = None) -> str:
    """A list of every decision record in ``docs/adr/``, by number.

    ``names`` are the record files the site build collected (so a record added while the site
    builds is not linked before it is a page); by default, the files in the folder.
    """
    if names is None:
        names = (p.name for p in (DOCS_DIR / "adr").iterdir())
    files = sorted(DOCS_DIR / "adr" / name for name in names if ADR_FILE.match(name))
    if not files:
        return "No decisions recorded yet.\n"
    lines = ["| number | decision |", "|---|---|"]
    for path in files:
        number = path.name[:4]
        lines.append(f"| {number} | [{_cell(_adr_title(path))}]({path.name}) |")
    return "\n".join(lines) + "\n"


def hookspec_names() -> list[str]:
    """The names of every hookspec in ``bridge_core.hookspecs``."""
    from bridge_core import hookspecs

    marker = f"{hookspecs.PROJECT_NAME}_spec"
    return sorted(
        name
        for name, obj in vars(hookspecs).items()
        if inspect.isfunction(obj) and hasattr(obj, marker)
    )


def hookspec_summary() -> str:
    """One line per hookspec: its signature and the first paragraph of its docstring."""
    from bridge_core import hookspecs

    lines = ["| hook | signature | what it is for |", "|---|---|---|"]
    for name in hookspec_names():
        function = getattr(hookspecs, name)
        signature = f"{name}{inspect.signature(function)}".replace("'", "")
        lines.append(
            f"| [`{name}`](#{name}) | `{_cell(signature)}` | "
            f"{_cell(_first_paragraph(function.__doc__))} |"
        )
    return "\n".join(lines) + "\n"


def metrics_table() -> str:
    """Every metric ``GET /metrics`` exposes, from ``bridge_core.runtime.metrics``."""
    from prometheus_client import Counter

    from bridge_core.runtime.metrics import GatewayMetrics, Snapshot

    metrics = GatewayMetrics()
    labels: dict[str, list[str]] = {}
    for value in vars(metrics).values():
        if isinstance(value, Counter):
            labels[value._name] = list(getattr(value, "_labelnames", ()))
    # One sample in every snapshot figure, so the collector shows its labels.
    sample: dict[str, Any] = {name: {"x": 1} for name in Snapshot.__dataclass_fields__}
    metrics.set_snapshot(Snapshot(**sample))
    rows = ["| metric | type | labels | what it counts |", "|---|---|---|---|"]
    for family in metrics.registry.collect():
        names = labels.get(family.name)
        if names is None:
            names = sorted({key for s in family.samples for key in s.labels})
        exposed = f"{family.name}_total" if family.type == "counter" else family.name
        rows.append(
            f"| `{exposed}` | {family.type} | {', '.join(f'`{n}`' for n in names) or '-'} | "
            f"{_cell(family.documentation)} |"
        )
    return "\n".join(rows) + "\n"


def _command_help(command: Any, words: list[str]) -> list[str]:
    """The ``--help`` text of a click command and of each subcommand, as markdown sections."""
    import click

    name = " ".join(words)
    with click.Context(
        command, info_name=name, terminal_width=100, help_option_names=["-h", "--help"]
    ) as ctx:
        text = command.get_help(ctx)
    level = "#" * min(2 + len(words) - 1, 4)
    out = [f"{level} `{name}`\n", f"```\n{text}\n```\n"]
    if isinstance(command, click.Group):
        for sub_name in command.list_commands(ctx):
            sub = command.get_command(ctx, sub_name)
            if sub is not None and not sub.hidden:
                out.extend(_command_help(sub, [*words, sub_name]))
    return out


def cli_help(*path: str) -> str:
    """``chatbridge [path...] --help``, recursively, from the real click commands."""
    import click

    from bridge_core.cli import build_cli

    command: click.Command = build_cli()
    words = ["chatbridge"]
    for word in path:
        assert isinstance(command, click.Group)
        with click.Context(command) as ctx:
            sub = command.get_command(ctx, word)
        if sub is None:
            raise LookupError(f"chatbridge has no command {' '.join([*words[1:], word])!r}")
        command = sub
        words.append(word)
    return "\n".join(_command_help(command, words))


def cli_reference() -> str:
    return cli_help()


def cli_ledger() -> str:
    return cli_help("ledger")


def ledger_markers() -> str:
    """The recovery markers exactly as the ledger writes them (``bridge_core.ledger.schedule``)."""
    from bridge_core.ledger.schedule import MARKER, MARKER_PARTIAL

    return (
        "A whole reply resent:\n\n"
        f"```\n{MARKER}\n<the reply, unchanged>\n```\n\n"
        "The rest of a reply split into several messages, resent after some parts arrived:\n\n"
        f"```\n{MARKER_PARTIAL}\n<the parts not known to have arrived>\n```\n"
    )


def notify_examples() -> str:
    """What live messages and summaries look like, rendered by ``bridge_core.notify.render``."""
    from bridge_core.events import Outcome
    from bridge_core.notify.render import (
        AgentState,
        SummaryCounts,
        render_agent,
        render_summary,
    )
    from bridge_core.provider import LengthUnit

    def show(text: str) -> str:
        return text

    options: dict[str, Any] = {"clean": show, "max_length": 4000, "unit": LengthUnit.CHARACTERS}
    running = AgentState("fix-flaky-test", "w1", status="running the suite (3/5) @everyone")
    done = AgentState("fix-flaky-test", "w1", outcome=Outcome.DONE, cost=0.42, turns=7)
    crashed = AgentState("migrate-db", "w1", outcome=Outcome.CRASHED, cost=1.1, turns=12)
    names = [f"agent-{n}" for n in range(1, 6)]
    burst = SummaryCounts("w1", 30, running=0, done=28, failed=2, killed=0, gone=0, names=names)
    lines = [
        "A live message while the agent runs, then the same message edited at the end (note the "
        "agent's `@everyone`, broken so it pings nobody):",
        "",
        f"```\n{render_agent(running, **options)}\n```",
        "",
        f"```\n{render_agent(done, **options)}\n```",
        "",
        "A failure gets a post of its own:",
        "",
        f"```\n{render_agent(crashed, **options)}\n```",
        "",
        "A burst's summary, at the end of scenario B:",
        "",
        f"```\n{render_summary(burst, **options)}\n```",
    ]
    return "\n".join(lines) + "\n"


def event_kinds() -> str:
    """Every fleet event kind: its fields, whether it notifies, and its JSON form."""
    import dataclasses

    from bridge_core import events

    common = {f.name for f in dataclasses.fields(events.FleetEvent)}
    samples: dict[str, dict[str, Any]] = {
        "AgentSpawned": {"title": "fix the flaky test"},
        "StatusChanged": {"status": "running the suite (3/5)"},
        "AgentFinished": {"outcome": events.Outcome.DONE, "cost": 0.42, "turns": 7},
        "AgentGone": {"reason": "host shut down"},
        "Output": {"text": "collected 120 items"},
        "ToolStarted": {"tool": "pytest"},
        "ToolFinished": {"tool": "pytest", "ok": True},
        "StorePersistFailed": {"error": "disk full"},
        "RepoHealth": {"status": "ok"},
    }
    rows = [
        "| kind | its own fields | notifies by default | JSON |",
        "|---|---|---|---|",
    ]
    # A slots dataclass is a second class object; the first stays among the subclasses.
    kinds = [
        cls
        for cls in events.FleetEvent.__subclasses__()
        if getattr(events, cls.__name__, None) is cls and cls is not events.UnknownEvent
    ]
    for cls in kinds:
        own = [f for f in dataclasses.fields(cls) if f.name not in common]
        fields = ", ".join(f"`{f.name}`" for f in own) or "-"
        event = cls("a1", "w1", **samples.get(cls.kind, {}))
        sample = json.dumps(events.event_to_json(event), ensure_ascii=False)
        notifies = "yes" if cls.kind in events.NOTIFYING_KINDS else "no"
        rows.append(f"| `{cls.kind}` | {fields} | {notifies} | `{_cell(sample)}` |")
    outcomes = ", ".join(f"`{o.value}`" for o in events.Outcome)
    rows.append("")
    rows.append(
        'Every event has `kind`, `agent` (required), `workspace` (default `"default"`) and an '
        f"optional `at` (the fleet's epoch seconds, informational). `outcome` is one of {outcomes}."
    )
    try:
        events.parse_event({"kind": "AgentFinished", "agent": "a1", "outcome": "exploded"})
    except events.EventError as error:
        rows.append("")
        rows.append(f"A bad event is refused with the field and what was wrong: `{error}`.")
    return "\n".join(rows) + "\n"


def kit_modules() -> str:
    """Every module of ``bridge_core.testing`` with the first paragraph of its docstring."""
    import pkgutil

    import bridge_core.testing as kit

    rows = ["| module | what it is |", "|---|---|"]
    for info in sorted(pkgutil.iter_modules(kit.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{kit.__name__}.{info.name}")
        rows.append(f"| `{module.__name__}` | {_cell(_first_paragraph(module.__doc__))} |")
    return "\n".join(rows) + "\n"


def _duration(seconds: float) -> str:
    for unit, size in (("days", 86400.0), ("hours", 3600.0), ("minutes", 60.0)):
        if seconds >= size and seconds % size == 0:
            count = int(seconds // size)
            return f"{count} {unit[:-1] if count == 1 else unit}"
    return f"{seconds:g} s"


def ledger_schedule() -> str:
    """The resend schedule from the defaults of ``bridge_core.ledger.schedule.Schedule``."""
    from bridge_core.ledger.schedule import Schedule

    schedule = Schedule()
    rows = [
        "| attempt | when | where |",
        "|---|---|---|",
        "| first send | at once, when the reply is recorded | in process |",
    ]
    previous = "the first send"
    for index, delay in enumerate(schedule.resend_delays, start=1):
        if index > schedule.max_resends:
            break
        rows.append(
            f"| resend {index} | {_duration(delay)} after {previous} failed with a transient "
            "error | in process |"
        )
        previous = f"resend {index}"
    for index in range(len(schedule.resend_delays) + 1, schedule.max_resends + 1):
        rows.append(
            f"| resend {index} | at the **next start** of the gateway (its boot sweep), or when "
            "the platform reconnects | the next process |"
        )
    rows.append(
        f"| then | abandoned: {schedule.max_resends} resends, or {_duration(schedule.freshness)} "
        "since the reply was recorded, whichever comes first | kept and visible, not sent |"
    )
    rows.append("")
    rows.append(
        f"Delivered rows are pruned after {_duration(schedule.keep_delivered)}. A rate limit "
        "without a `retry_after` waits "
        f"{_duration(schedule.default_penalty)}."
    )
    return "\n".join(rows) + "\n"


README_BLOCK = re.compile(
    r"<!-- (demo|test)-command -->\s*(```.*?```)\s*<!-- /\1-command -->", re.S
)


def readme_commands() -> str:
    """The README's two commands (between its ``<!-- demo-command -->`` and
    ``<!-- test-command -->`` markers), so the docs cannot tell a different story."""
    readme = (DOCS_DIR.parent / "README.md").read_text(encoding="utf-8")
    blocks = {match.group(1): match.group(2) for match in README_BLOCK.finditer(readme)}
    missing = {"demo", "test"} - set(blocks)
    if missing:
        raise LookupError(f"README.md has no <!-- {'/'.join(sorted(missing))}-command --> block")
    return (
        f"Try it (the demo):\n\n{blocks['demo']}\n\nRun the whole test suite:\n\n{blocks['test']}\n"
    )


GENERATORS: dict[str, Callable[[], str]] = {
    "adr-index": adr_index,
    "budget-presets": budget_presets,
    "cli-ledger": cli_ledger,
    "cli-reference": cli_reference,
    "config-error-example": config_error_example,
    "config-reference": config_reference,
    "error-table": error_table,
    "hookspecs": hookspec_summary,
    "event-kinds": event_kinds,
    "kit-modules": kit_modules,
    "ledger-markers": ledger_markers,
    "ledger-schedule": ledger_schedule,
    "metrics": metrics_table,
    "notify-examples": notify_examples,
    "provider-settings": provider_settings,
    "readme-commands": readme_commands,
}


# --------------------------------------------------------------------------- the mkdocs side

_OUTSIDE_LINK = re.compile(r"(?<!!)\[([^\]]+)\]\(((?:\.\./)+[^)\s]+)\)")


def _rewrite_outside_links(markdown: str, page_path: str) -> str:
    """Links that leave ``docs/`` become the repository path in code font."""
    page_dir = posixpath.dirname(page_path)

    def replace(match: re.Match[str]) -> str:
        target = posixpath.normpath(posixpath.join("docs", page_dir, match.group(2)))
        if target.startswith("docs/"):
            return match.group(0)
        return f"{match.group(1)} (`{target}`)"

    return _OUTSIDE_LINK.sub(replace, markdown)


def expand_markers(
    markdown: str,
    *,
    where: str = "page",
    overrides: Mapping[str, Callable[[], str]] | None = None,
) -> str:
    """Replace each ``<!-- generated: NAME -->`` line with what ``GENERATORS[NAME]`` renders
    (or ``overrides[NAME]``, which the build uses to hand generators what it collected)."""

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        generator = (overrides or {}).get(name) or GENERATORS.get(name)
        if generator is None:
            raise KeyError(
                f"{where}: unknown generated block {name!r}; known: {sorted(GENERATORS)}"
            )
        try:
            return generator().rstrip("\n")
        except Exception as error:
            raise RuntimeError(f"{where}: generating {name!r} failed: {error!r}") from error

    return MARKER.sub(replace, markdown)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    src = page.file.src_uri
    collected = [f.src_uri[len("adr/") :] for f in files if f.src_uri.startswith("adr/")]
    overrides = {"adr-index": lambda: adr_index(collected)}
    return _rewrite_outside_links(expand_markers(markdown, where=src, overrides=overrides), src)


if __name__ == "__main__":  # pragma: no cover - a convenience for writers
    if len(sys.argv) != 2 or sys.argv[1] not in GENERATORS:
        sys.exit(f"usage: python docs/hooks.py {{{'|'.join(sorted(GENERATORS))}}}")
    sys.stdout.write(GENERATORS[sys.argv[1]]())
