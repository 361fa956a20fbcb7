"""The independent transcript checker catches what it must (so a green check means something)."""

from __future__ import annotations

import json
from pathlib import Path

from bridge_slack import SLACK_BUDGET
from bridge_teams import TEAMS_BUDGET

from bridge_core.testing.budget import (
    TranscriptEntry,
    assert_paced,
    check_budget,
    check_edit_spacing,
    max_in_window,
    read_transcript,
)


def sends(
    times: list[float], op: str = "post", message: str | None = None
) -> list[TranscriptEntry]:
    return [
        TranscriptEntry(t=t, op=op, channel="c", message_id=message or f"m{n}", text="")
        for n, t in enumerate(times)
    ]


def test_bucket_overdraw_is_caught() -> None:
    assert check_budget(sends([0.0, 0.0, 0.0]), SLACK_BUDGET) == []
    violations = check_budget(sends([0.0, 0.0, 0.0, 0.5]), SLACK_BUDGET)
    assert [v.rule for v in violations] == ["token bucket"] and violations[0].at == 0.5
    assert check_budget(sends([0.0, 0.0, 0.0, 1.0]), SLACK_BUDGET) == []


def test_hourly_window_is_caught_where_the_bucket_would_pass() -> None:
    at_cap = [n * 3599.0 / 1799 for n in range(1800)]
    assert check_budget(sends(at_cap), TEAMS_BUDGET) == []
    over = [n * 3599.0 / 1800 for n in range(1801)]  # 1,801 sends inside one hour
    rules = {v.rule for v in check_budget(sends(over), TEAMS_BUDGET)}
    assert rules == {"window 1800/3600s"}
    assert max_in_window(over, 3600.0) == 1801


def test_short_windows_are_caught() -> None:
    eight_in_one = [n * 0.1 for n in range(8)]
    rules = {v.rule for v in check_budget(sends(eight_in_one), TEAMS_BUDGET)}
    assert "window 7/1s" in rules


def test_edit_spacing() -> None:
    ok = sends([0.0], "post", "m") + sends([2.0, 4.0], "edit", "m")
    assert check_edit_spacing(ok, 2.0) == []
    close = sends([0.0], "post", "m") + sends([1.5], "edit", "m") + sends([1.5], "edit", "x")
    violations = check_edit_spacing(close, 2.0)
    assert len(violations) == 1 and "message m" in violations[0].detail


def test_assert_paced_lists_violations_and_reads_files(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    lines = [
        {"t": t, "op": "edit", "channel": "c", "message_id": "m", "text": "x"}
        for t in (0.0, 0.2, 0.4, 0.6, 0.8)
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    entries = read_transcript(path)
    try:
        assert_paced(entries, SLACK_BUDGET)
    except AssertionError as exc:
        message = str(exc)
    else:
        raise AssertionError("assert_paced passed an overdrawn, badly spaced transcript")
    assert "token bucket" in message and "edit spacing" in message
