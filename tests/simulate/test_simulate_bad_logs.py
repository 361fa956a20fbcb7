"""``chatbridge simulate`` on logs nobody means to write: each is refused before anything runs,
naming the file and the line, never a traceback or a replay that does not end; and the log is
streamed, so memory does not grow with its length (ADR 0071)."""

from __future__ import annotations

import itertools
import json
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
from click.testing import CliRunner

from bridge_core.cli import build_cli
from bridge_core.commands import simulate
from bridge_core.commands.simulate import HORIZON, LogItem, iter_log, read_log, run_simulation
from bridge_core.events import parse_event
from bridge_core.notify import NotifyConfig
from bridge_core.plugins import LOAD_PLUGINS_VAR
from bridge_core.provider import UNLIMITED_BUDGET

GOOD = b'{"t": 0, "kind": "AgentSpawned", "agent": "a1"}\n'


def refused(tmp_path: Path, second_line: bytes) -> str:
    log = tmp_path / "events.jsonl"
    log.write_bytes(GOOD + second_line + b"\n" + GOOD)
    result = CliRunner(env={LOAD_PLUGINS_VAR: ""}).invoke(build_cli(), ["simulate", str(log)])
    assert result.exit_code != 0
    assert "Traceback" not in result.output
    assert f"{log}, line 2:" in result.output, result.output
    return result.output


@pytest.mark.parametrize(
    ("line", "words"),
    [
        (b'{"t": 1, "kind": "AgentSpawned", "agent": "caf\xe9"}', "not UTF-8 (byte 0xe9"),
        (b"\xff\xfe{}", "not UTF-8"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b'{"t": 1, "kind": "X", "agent": "a", "deep": ' + b"[" * 100_000 + b"}", "nested"),
        (b'{"t": 1, "kind": "X", "agent": "a", "n": ' + b"9" * 5000 + b"}", "cannot be read"),
        (b'{"t": 1e9, "kind": "AgentSpawned", "agent": "a"}', "30 days"),
        (b'{"t": 1e308, "kind": "AgentSpawned", "agent": "a"}', "30 days"),
        (b'{"t": 1e309, "kind": "AgentSpawned", "agent": "a"}', "number >= 0"),
        (b'{"t": ' + b"9" * 400 + b', "kind": "AgentSpawned", "agent": "a"}', "too large"),
        (b'{"t": 1, "fault": "rate_limited", "retry_after": ' + b"9" * 400 + b"}", "too large"),
        (b'{"t": 1, "kind": "AgentSpawned", "agent": "x\\ud800"}', "agent: contains a lone"),
        (b'{"t": 1, "kind": "AgentSpawned", "agent": "x\\u0000"}', "agent: contains NUL"),
    ],
    ids=[
        "latin-1",
        "binary",
        "nested array",
        "nested value",
        "5000 digits",
        "t 1e9",
        "t 1e308",
        "t inf",
        "t of 400 digits",
        "retry_after of 400 digits",
        "surrogate",
        "NUL",
    ],
)
def test_bad_lines_are_refused_naming_the_line(tmp_path: Path, line: bytes, words: str) -> None:
    assert words in refused(tmp_path, line)


def test_a_line_longer_than_the_limit_is_refused_without_reading_it_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(simulate, "MAX_LINE_BYTES", 1000)
    line = b'{"t": 1, "kind": "AgentSpawned", "agent": "' + b"a" * 5000 + b'"}'
    assert "longer than 1000 bytes" in refused(tmp_path, line)


def test_the_horizon_itself_is_allowed(tmp_path: Path) -> None:
    log = tmp_path / "events.jsonl"
    log.write_text(json.dumps({"t": HORIZON, "kind": "AgentSpawned", "agent": "a"}) + "\n")
    ((t, _),) = read_log(log)
    assert t == HORIZON


def test_reading_a_long_log_holds_one_line_at_a_time(tmp_path: Path) -> None:
    log = tmp_path / "events.jsonl"
    pad = "x" * 400
    with log.open("w", encoding="utf-8") as out:
        for i in range(20_000):  # 9 MB
            event = {"t": i, "kind": "StatusChanged", "agent": f"a{i % 7}", "status": pad}
            out.write(json.dumps(event) + "\n")
    tracemalloc.start()
    try:
        count = sum(1 for _ in iter_log(log))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == 20_000
    assert peak < 1_000_000, peak  # a list of the lines would be over 9 MB


def test_the_replay_takes_each_line_only_when_its_time_comes(tmp_path: Path) -> None:
    taken: list[tuple[float, float]] = []  # (the line's t, virtual time when it was taken)

    def lines() -> Iterator[LogItem]:
        for i in range(20):
            t = i * 10.0
            taken.append((t, trio.current_time()))
            yield t, parse_event({"kind": "StatusChanged", "agent": "a", "status": str(i)})

    run_simulation(
        lines(),
        capabilities=simulate.FALLBACK_CAPABILITIES["console"],
        budget=UNLIMITED_BUDGET,
        notify=NotifyConfig(),
        transcript=tmp_path / "transcript.jsonl",
    )
    assert len(taken) == 20
    # a line is taken after the one before it was replayed, never all of them up front
    for (previous_t, _), (_, taken_at) in itertools.pairwise(taken):
        assert taken_at >= previous_t
