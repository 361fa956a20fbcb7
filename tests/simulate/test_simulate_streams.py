"""``chatbridge simulate`` with streamed replies in its event log: the sends each reply cost."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from bridge_slack import SLACK_BUDGET
from click.testing import CliRunner

from bridge_core.cli import build_cli
from bridge_core.plugins import LOAD_PLUGINS_VAR
from bridge_core.testing.budget import assert_paced, read_transcript


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner(env={LOAD_PLUGINS_VAR: ""})


def write_log(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def streaming_log(replies: int, deltas: int, over: float) -> list[dict[str, Any]]:
    lines: list[dict[str, Any]] = []
    for i in range(deltas):
        for r in range(replies):
            lines.append({"t": round(i * over / (deltas - 1), 6), "reply": f"r{r}", "delta": "ab "})
    lines += [{"t": over, "reply": f"r{r}", "end": True} for r in range(replies)]
    return lines


def test_a_streamed_reply_is_reported_with_its_sends(runner: CliRunner, tmp_path: Path) -> None:
    log = write_log(tmp_path / "log.jsonl", streaming_log(1, 1000, 30.0))
    out = tmp_path / "transcript.jsonl"
    result = runner.invoke(
        build_cli(),
        ["simulate", str(log), "-p", "slack", "--json", "--transcript", str(out)],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    r0 = summary["replies"]["r0"]
    assert r0["posts"] == 1 and r0["edits"] <= 16 and r0["delivered"]
    assert r0["first_text_after"] == 0.0 and r0["final_after"] <= SLACK_BUDGET.edit_spacing
    entries = read_transcript(out)
    assert entries[-1].text == "ab " * 1000
    assert_paced(entries, SLACK_BUDGET)


def test_many_replies_and_the_table(runner: CliRunner, tmp_path: Path) -> None:
    log = write_log(tmp_path / "log.jsonl", streaming_log(10, 100, 30.0))
    result = runner.invoke(build_cli(), ["simulate", str(log), "-p", "slack"])
    assert result.exit_code == 0, result.output
    assert "sends per streamed reply" in result.output and "r9" in result.output
    summary = json.loads(
        runner.invoke(build_cli(), ["simulate", str(log), "-p", "slack", "--json"]).stdout
    )
    assert all(r["delivered"] and r["posts"] == 1 for r in summary["replies"].values())
    assert summary["violations"] == [] and summary["undelivered"] == []


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ({"t": 0, "reply": "", "delta": "x"}, '"reply" must be a non-empty string'),
        ({"t": 0, "reply": "r", "delta": 3}, '"delta" must be a string'),
        ({"t": 0, "reply": "r"}, 'needs a "delta" or "end"'),
        ({"t": 0, "reply": "r", "delta": "x", "color": 1}, "unexpected field(s) color"),
    ],
)
def test_a_bad_reply_line_is_named(
    runner: CliRunner, tmp_path: Path, line: dict[str, Any], says: str
) -> None:
    log = write_log(tmp_path / "log.jsonl", [{"t": 0, "reply": "ok", "delta": "x"}, line])
    result = runner.invoke(build_cli(), ["simulate", str(log)])
    assert result.exit_code == 1 and "line 2" in result.output and says in result.output
