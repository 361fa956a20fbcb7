"""``chatbridge simulate`` through click's runner."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import pytest
from bridge_discord import DISCORD_BUDGET
from bridge_slack import SLACK_BUDGET
from bridge_teams import TEAMS_BUDGET
from click.testing import CliRunner

from bridge_core.cli import build_cli
from bridge_core.commands import simulate
from bridge_core.plugins import LOAD_PLUGINS_VAR
from bridge_core.testing.budget import assert_paced, max_in_window, read_transcript


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner(env={LOAD_PLUGINS_VAR: ""})  # built-ins only: slack etc. use the presets


def write_log(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def burst_log() -> list[dict[str, Any]]:
    lines: list[dict[str, Any]] = []
    for i in range(30):
        lines.append({"t": i * 0.06, "kind": "AgentSpawned", "agent": f"b{i}", "workspace": "w1"})
    for i, crashed in enumerate(("b7", "b19")):
        lines.append(
            {"t": 30, "kind": "AgentFinished", "agent": crashed, "outcome": "crashed"}
            | {"workspace": "w1", "turns": i}
        )
    rest = [f"b{i}" for i in range(30) if i not in (7, 19)]
    for n, name in enumerate(rest):
        lines.append(
            {"t": 31 + 3 * n, "kind": "AgentFinished", "agent": name, "workspace": "w1"}
            | {"outcome": "done", "cost": 0.1, "turns": 2}
        )
    return lines


def invoke(runner: CliRunner, *args: str) -> Any:
    return runner.invoke(build_cli(), ["simulate", *args], catch_exceptions=False)


def test_burst_on_slack_summary_json(runner: CliRunner, tmp_path: Path) -> None:
    log = write_log(tmp_path / "events.jsonl", burst_log())
    out = tmp_path / "out" / "transcript.jsonl"
    result = invoke(runner, str(log), "--provider", "slack", "--transcript", str(out), "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["posts"] == 3  # one summary, two failure posts
    assert summary["undelivered"] == [] and len(summary["terminal_waits"]) == 30
    assert summary["violations"] == []
    assert summary["largest_burst"] <= 3
    entries = read_transcript(out)
    assert summary["posts"] + summary["edits"] == len(entries)
    assert "28 done" in [e for e in entries if e.op == "edit"][-1].text
    assert_paced(entries, SLACK_BUDGET)


def test_table_names_where_the_budget_came_from(runner: CliRunner, tmp_path: Path) -> None:
    log = write_log(tmp_path / "events.jsonl", burst_log())
    result = invoke(runner, str(log), "--provider", "teams")
    assert result.exit_code == 0, result.output
    assert "built-in preset" in result.stdout
    for label in ("posts", "edits", "largest burst", "peak hourly rate", "b7"):
        assert label in result.stdout
    preset = json.loads(invoke(runner, str(log), "--provider", "teams", "--json").stdout)
    assert preset["profile_from"] == "the built-in preset"
    assert preset["budget"] == TEAMS_BUDGET.to_json()
    assert preset["capabilities"]["length_unit"] == "json_ascii"


def test_uses_the_plugin_when_it_is_installed(tmp_path: Path) -> None:
    pytest.importorskip("bridge_discord")
    log = write_log(tmp_path / "events.jsonl", burst_log())
    result = CliRunner().invoke(build_cli(), ["simulate", str(log), "-p", "discord", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["profile_from"] == "its plugin"
    assert summary["budget"] == DISCORD_BUDGET.to_json()


def test_an_hour_of_events_on_teams_stays_in_budget(runner: CliRunner, tmp_path: Path) -> None:
    lines: list[dict[str, Any]] = []
    for a in range(12):
        lines.append({"t": a * 3, "kind": "AgentSpawned", "agent": f"a{a}", "workspace": "w"})
    for n in range(3000):
        t = 40 + n * 1.18
        lines.append(
            {"t": t, "kind": "StatusChanged", "agent": f"a{n % 12}", "workspace": "w"}
            | {"status": f"step {n}"}
        )
    for a in range(12):
        lines.append(
            {"t": 3600 + a, "kind": "AgentFinished", "agent": f"a{a}", "workspace": "w"}
            | {"outcome": "done"}
        )
    log = write_log(tmp_path / "hour.jsonl", lines)
    out = tmp_path / "t.jsonl"
    result = invoke(runner, str(log), "--provider", "teams", "--json", "--transcript", str(out))
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["peak_hourly"] <= 1800 and summary["largest_burst"] <= 7
    assert summary["undelivered"] == [] and summary["virtual_seconds"] >= 3600
    entries = read_transcript(out)
    assert max_in_window([e.t for e in entries], 3600.0) == summary["peak_hourly"]
    assert_paced(entries, TEAMS_BUDGET)


def test_fault_lines(runner: CliRunner, tmp_path: Path) -> None:
    lines = [
        {"t": 0, "kind": "AgentSpawned", "agent": "a1", "workspace": "w"},
        {"t": 5, "fault": "rate_limited", "retry_after": 5},
        {"t": 5, "kind": "StatusChanged", "agent": "a1", "workspace": "w", "status": "x"},
        {"t": 20, "fault": "not_found"},
        {"t": 20, "kind": "StatusChanged", "agent": "a1", "workspace": "w", "status": "y"},
        {"t": 30, "kind": "StatusChanged", "agent": "a1", "workspace": "w", "status": "z"},
        {"t": 40, "fault": "forbidden"},
        {"t": 40, "kind": "AgentFinished", "agent": "a1", "workspace": "w", "outcome": "done"},
    ]
    log = write_log(tmp_path / "faults.jsonl", lines)
    out = tmp_path / "t.jsonl"
    result = invoke(runner, str(log), "--json", "--provider", "slack", "--transcript", str(out))
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["errors"] == 3 and summary["rate_limit_pauses"] == 1
    assert summary["terminal_waits"] == {"a1": 300.0}  # delivered at the 5-minute re-check
    entries = read_transcript(out)
    assert [(e.t, e.op, e.error) for e in entries] == [
        (2.0, "post", None),
        (5.0, "error", "RateLimited"),
        (10.0, "edit", None),
        (20.0, "error", "NotFound"),
        (30.0, "post", None),  # the next update posts exactly one new message
        (40.0, "error", "Forbidden"),
        (340.0, "edit", None),
    ]


def test_config_file(runner: CliRunner, tmp_path: Path) -> None:
    config = tmp_path / "sim.toml"
    config.write_text(
        'budget = "discord"\nedit = false\n[notify]\nhold = 0.5\nthreshold = 3\n'
        'workspaces = ["w1"]\n',
        encoding="utf-8",
    )
    spawn = {"t": 0, "kind": "AgentSpawned", "workspace": "w1"}
    lines: list[dict[str, Any]] = [spawn | {"agent": f"a{i}"} for i in range(3)]
    lines += [{"t": 0, "kind": "AgentSpawned", "agent": "other", "workspace": "w2"}]
    lines += [
        {"t": 5, "kind": "StatusChanged", "agent": "a0", "workspace": "w1", "status": "s"},
        {"t": 9, "kind": "AgentFinished", "agent": "a0", "workspace": "w1", "outcome": "done"},
    ]
    log = write_log(tmp_path / "e.jsonl", lines)
    out = tmp_path / "t.jsonl"
    result = invoke(runner, str(log), "--config", str(config), "--json", "--transcript", str(out))
    assert result.exit_code == 0, result.output
    entries = read_transcript(out)
    assert [(e.t, e.op) for e in entries] == [(0.5, "post"), (9.0, "post")]
    assert "3 agents" in entries[0].text and "a0" in entries[1].text


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("{not json", "line 2: not valid JSON"),
        ("[1, 2]", "line 2: each line must be a JSON object"),
        ('{"kind": "AgentSpawned", "agent": "x"}', 'line 2: "t" (seconds from the start) is'),
        ('{"t": -1, "kind": "AgentSpawned", "agent": "x"}', 'line 2: "t" must be a number'),
        ('{"t": 0.5, "kind": "AgentSpawned", "agent": "x"}', 'line 2: "t" goes back in time'),
        ('{"t": 3, "fault": "meteor"}', "line 2: unknown fault 'meteor'"),
        ('{"t": 3, "fault": "rate_limited", "retry_after": "soon"}', "line 2: retry_after"),
        ('{"t": 3, "kind": "StatusChanged", "agent": "x"}', "line 2: bad event: status"),
        ('{"t": 3, "kind": "AgentFinished", "agent": "x", "outcome": "meh"}', "outcome"),
    ],
)
def test_a_malformed_line_stops_with_its_number(
    runner: CliRunner, tmp_path: Path, line: str, expected: str
) -> None:
    log = tmp_path / "bad.jsonl"
    log.write_text('{"t": 1, "kind": "AgentSpawned", "agent": "ok"}\n' + line + "\n")
    result = runner.invoke(build_cli(), ["simulate", str(log)])
    assert result.exit_code == 1
    assert expected in result.output and "bad.jsonl" in result.output


def test_bad_config_names_the_key(runner: CliRunner, tmp_path: Path) -> None:
    log = write_log(tmp_path / "e.jsonl", burst_log())
    config = tmp_path / "c.toml"
    config.write_text("[notify]\nhold = -1\n")
    result = runner.invoke(build_cli(), ["simulate", str(log), "--config", str(config)])
    assert result.exit_code == 1 and "notify.hold" in result.output


def test_a_long_log_shows_progress(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(simulate, "PROGRESS_FROM", 10)
    log = write_log(tmp_path / "e.jsonl", burst_log())
    result = invoke(runner, str(log), "--json")
    assert result.exit_code == 0
    assert json.loads(result.stdout)["posts"] == 3


@pytest.mark.parametrize("module", ["bridge_slack", "bridge_discord", "bridge_teams"])
def test_the_fallbacks_are_what_each_plugin_declares(module: str) -> None:
    # The core keeps copies for simulating a platform whose plugin is not installed.
    kind = importlib.import_module(f"{module}.plugin").provider_type()
    assert simulate.FALLBACK_BUDGETS[kind.name] == kind.budget
    assert simulate.FALLBACK_CAPABILITIES[kind.name].max_length == kind.capabilities.max_length
    assert simulate.FALLBACK_CAPABILITIES[kind.name].length_unit == kind.capabilities.length_unit
