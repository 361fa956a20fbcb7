"""Reference tables read from the code: the error table, budgets, hookspecs, metrics, fleet events,
the ledger's markers and schedule, rendered notifications, the provider kit's modules."""

from __future__ import annotations

import importlib
import inspect
import json
from typing import Any

from bridge_docgen.text import cell, code_cell, duration, first_paragraph, number

__all__ = [
    "budget_presets",
    "error_table",
    "event_kinds",
    "hookspec_names",
    "hookspec_summary",
    "kit_modules",
    "ledger_markers",
    "ledger_schedule",
    "log_records",
    "metrics_table",
    "notify_examples",
    "platform_errors",
]


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
            f"| `{reading.error.__name__}` | `{base}` | {cell(reading.meaning)} | "
            f"{cell(reading.notifier.value)} | {cell(reading.ledger.value)} |"
        )
    rows.append("")
    rows.append(
        "An error a provider raises that is not one of these (it should not happen) is read as "
        "the last row, transient, by `reading_for`."
    )
    return "\n".join(rows) + "\n"


def platform_errors() -> str:
    """How each installed provider reads its platform's error codes: the ``error_codes`` table
    its provider type declares, read from the provider registry (no plugin is named here)."""
    from bridge_core.plugins import create_plugin_manager

    out: list[str] = []
    for entry in create_plugin_manager().providers.entries():
        table = entry.type.error_codes
        if table is None:
            continue
        out.append(f"### {table.platform}\n")
        source = f" Each code is {table.source}." if table.source else ""
        name, distribution = entry.type.name, entry.distribution
        out.append(f"From the `{name}` provider's `error_codes` ({distribution}).{source}\n")
        out.append("| code | raised as | what it means |")
        out.append("|---|---|---|")
        for code, reading in table.items():
            out.append(f"| `{code}` | `{reading.error.__name__}` | {cell(reading.meaning)} |")
        out.append("")
    if not out:
        out.append("No installed provider declares a table of error codes.\n")
    return "\n".join(out)


def budget_presets() -> str:
    """The budget presets of the installed plugins (and the core's ``unlimited``) as a table,
    read from the provider registry (``register_budget_presets``)."""
    from bridge_core.plugins import create_plugin_manager

    presets = create_plugin_manager().providers.budget_presets

    rows = [
        "| preset | burst | refill per second | sliding windows | edit spacing |",
        "|---|---|---|---|---|",
    ]
    for name, budget in sorted(presets.items()):
        windows = (
            ", ".join(f"{w.limit:,} in {number(w.seconds)} s" for w in budget.windows) or "none"
        )
        rows.append(
            f"| `{name}` | {budget.burst:,} | {number(budget.per_second)} | {windows} | "
            f"{budget.edit_spacing:g} s |"
        )
    return "\n".join(rows) + "\n"


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
            f"| [`{name}`](#{name}) | {code_cell(signature)} | "
            f"{cell(first_paragraph(function.__doc__))} |"
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
            f"{cell(family.documentation)} |"
        )
    return "\n".join(rows) + "\n"


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
    # A slots dataclass is a second class object; the first stays among the subclasses. Only the
    # module's own exports are kinds (its private twin of StatusChanged is not).
    kinds = [
        cls
        for cls in events.FleetEvent.__subclasses__()
        if cls.__name__ in events.__all__
        and getattr(events, cls.__name__, None) is cls
        and cls is not events.UnknownEvent
    ]
    for cls in kinds:
        own = [f for f in dataclasses.fields(cls) if f.name not in common]
        fields = ", ".join(f"`{f.name}`" for f in own) or "-"
        event = cls("a1", "w1", **samples.get(cls.kind, {}))
        sample = json.dumps(events.event_to_json(event), ensure_ascii=False)
        notifies = "yes" if cls.kind in events.NOTIFYING_KINDS else "no"
        rows.append(f"| `{cls.kind}` | {fields} | {notifies} | {code_cell(sample)} |")
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


def log_records() -> str:
    """The conversation log's record types (what an agent's history holds), with their fields."""
    import dataclasses

    from bridge_core import conversation

    rows = ["| record | what it is | fields |", "|---|---|---|"]
    for cls in (conversation.Turn, conversation.Frame, conversation.Join, conversation.Leave):
        fields = ", ".join(f"`{f.name}`" for f in dataclasses.fields(cls))
        summary = {
            "Turn": "a user message admitted into the channel's log",
            "Frame": "an agent's answer, recorded before it is sent",
            "Join": "a member joined the channel's agent group",
            "Leave": "a member left, gracefully or by expiry",
        }[cls.__name__]
        rows.append(f"| `{cls.__name__}` | {summary} | {fields} |")
    return "\n".join(rows) + "\n"


def kit_modules() -> str:
    """Every module of ``bridge_core.testing`` with the first paragraph of its docstring."""
    import pkgutil

    import bridge_core.testing as kit

    rows = ["| module | what it is |", "|---|---|"]
    for info in sorted(pkgutil.iter_modules(kit.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{kit.__name__}.{info.name}")
        rows.append(f"| `{module.__name__}` | {cell(first_paragraph(module.__doc__))} |")
    return "\n".join(rows) + "\n"


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
            f"| resend {index} | {duration(delay)} after {previous} failed with a transient "
            "error | in process |"
        )
        previous = f"resend {index}"
    for index in range(len(schedule.resend_delays) + 1, schedule.max_resends + 1):
        rows.append(
            f"| resend {index} | at the **next start** of the gateway (its boot sweep), or when "
            "the platform reconnects | the next process |"
        )
    rows.append(
        f"| then | abandoned: {schedule.max_resends} resends, or {duration(schedule.freshness)} "
        "since the reply was recorded, whichever comes first | kept and visible, not sent |"
    )
    rows.append("")
    rows.append(
        f"Delivered rows are pruned after {duration(schedule.keep_delivered)}. A rate limit "
        "without a `retry_after` waits "
        f"{duration(schedule.default_penalty)}."
    )
    return "\n".join(rows) + "\n"
