"""``bench/diag_ledger_ceiling.py`` (ADR 0179) on small counts: it finds the writer thread, its
per-thread CPU accounting adds up, and the floors it compares with are measured, so the
diagnostic still runs after a change to the ledger or to the benchmark it borrows from."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def load_diagnostic(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.syspath_prepend(str(BENCH))  # it imports bench_ledger by name
    spec = importlib.util.spec_from_file_location("_diag_ceiling", BENCH / "diag_ledger_ceiling.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads /proc (Linux)")
def test_the_ceiling_diagnostic_measures_both_threads_and_the_floors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    diagnostic = load_diagnostic(monkeypatch)
    runs, floors = anyio.run(diagnostic.ledger_runs, 6000)
    assert set(runs) == set(floors) == {"submit", "at the turn"}
    for name, run in runs.items():
        assert run["rate"] > 0 and floors[name] > 0
        # (/proc counts in 10 ms ticks: 6,000 replies give each thread several)
        # each thread did work, and no thread's CPU exceeds the run's wall time
        assert 0 < run["writer_us"] <= run["wall_us"] * 1.2, name
        assert 0 < run["loop_us"] <= run["wall_us"] * 1.2, name
        assert run["per_commit"] >= 1
    trip = diagnostic.bare_round_trips(2, replies=3000)
    assert 0 < trip < 1000  # microseconds a reply
