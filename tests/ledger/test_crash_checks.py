"""The crash harness's check 4 (nothing sent after the row was abandoned) on constructed delivery
files: it allows a row's stamp exactly the error its stamping process reported, no fixed guess.

A PostgreSQL child stamps rows with its estimate of the database clock, off by at most half the
round trip it rests on (ADR 0018). A drain child's boot sweep runs on one renewal; on a loaded
host that round trip was measured at 140-380 ms, so a reply that failed at once was stamped
abandoned up to ~190 ms before its own send began, which the old fixed 50 ms slack read as a send
after the abandonment.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from crash_child import AppendingPlatform, report_clock_bound
from crash_harness import Report, check

REPLY = "1:X|2:C1|2:r5|0"  # r5 is scripted to fail for good: its abandonment is expected
ABANDONED_AT = 1_000.0


def _write(out: Path, *records: dict[str, Any]) -> None:
    out.write_text("".join(json.dumps(record) + "\n" for record in records))


def _start(t: float) -> dict[str, Any]:
    return {
        "ev": "start",
        "id": REPLY,
        "part": 0,
        "parts": 1,
        "fence": 1,
        "attempt": 1,
        "marked": False,
        "text": "reply r5",
        "pid": 7,
        "t": t,
    }


def _final() -> dict[str, dict[str, Any]]:
    row = {"state": "abandoned", "chunks": "", "updated_at": ABANDONED_AT, "last_error": "x"}
    return {REPLY: row}


def test_a_stamp_early_by_less_than_its_processs_reported_bound_is_no_late_send(
    tmp_path: Path,
) -> None:
    out = tmp_path / "sent.jsonl"
    clock = {"ev": "clock", "bound": 0.19, "pid": 7, "t": ABANDONED_AT - 1}
    _write(out, clock, _start(ABANDONED_AT + 0.1))
    check(out, _final(), Report())


@pytest.mark.parametrize("bound", [None, 0.005])
def test_a_send_begun_after_the_abandonment_beyond_the_bound_is_reported(
    tmp_path: Path, bound: float | None
) -> None:
    out = tmp_path / "sent.jsonl"
    clock = [] if bound is None else [{"ev": "clock", "bound": bound, "pid": 7, "t": 0.0}]
    _write(out, *clock, _start(ABANDONED_AT + 0.1))
    with pytest.raises(AssertionError, match="sent after it was abandoned"):
        check(out, _final(), Report())


class _Store:
    def __init__(self) -> None:
        self._clock_samples = [(0.4, 5.0)]

    async def renew(self) -> None:
        self._clock_samples = [*self._clock_samples, (0.01, 5.0)]


@pytest.mark.anyio
async def test_a_child_reports_its_clock_bound_at_the_open_and_when_a_renewal_changes_it(
    tmp_path: Path,
) -> None:
    out = tmp_path / "sent.jsonl"
    store = _Store()
    report_clock_bound(store, AppendingPlatform(str(out), 0.0, paced=False))
    await store.renew()
    await store.renew()  # the quickest sample is unchanged: no line
    bounds = [json.loads(line)["bound"] for line in out.read_text().splitlines()]
    assert bounds == [0.2, 0.005]
