"""``bench/diag_ledger_instructions.py`` (ADR 0192): its workload still runs the ledger's
``submit_rate`` after a change to either, and it reads valgrind's total (or says the run
failed). valgrind itself is not run here: a count takes a minute."""

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
    path = BENCH / "diag_ledger_instructions.py"
    spec = importlib.util.spec_from_file_location("_diag_instructions", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("writer", ["process", "thread"])
def test_the_workload_runs_the_ledger_as_the_benchmark_does(
    monkeypatch: pytest.MonkeyPatch, writer: str
) -> None:
    diagnostic = load_diagnostic(monkeypatch)
    monkeypatch.setattr(diagnostic, "WARM", 50)
    monkeypatch.setattr("gc.freeze", lambda: None)  # the test process keeps its collector
    anyio.run(diagnostic.workload, 200, True, writer, True, backend="asyncio")


class Finished:
    def __init__(self, returncode: int, stderr: str) -> None:
        self.returncode = returncode
        self._stderr = stderr

    def communicate(self) -> tuple[str, str]:
        return "", self._stderr


def test_the_total_is_read_from_valgrinds_summary_and_a_failed_run_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    diagnostic = load_diagnostic(monkeypatch)
    summary = "==1== Events    : Ir\n==1== Collected : 4231672770\n==1==\n==1== I   refs: 4,2\n"
    done: Any = Finished(0, summary)
    assert diagnostic.total(done) == 4_231_672_770
    failed: Any = Finished(1, "Traceback: ImportError: no bench_ledger\n")
    with pytest.raises(SystemExit, match=r"(?s)under valgrind failed \(1\).*ImportError"):
        diagnostic.total(failed)
