"""``bench/diag_ledger_process.py`` (ADR 0186) on small counts: the child process it puts in
the writer's place really records and settles every reply (the rows are in the file, delivered),
with group commits, and the thread writer it compares with is measured the same way; so the
diagnostic still runs after a change to the ledger's merged statements or to the store."""

from __future__ import annotations

import importlib.util
import sys
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def load_diagnostic(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.syspath_prepend(str(BENCH))  # it imports bench_ledger by name
    spec = importlib.util.spec_from_file_location("_diag_process", BENCH / "diag_ledger_process.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads /proc (Linux)")
@pytest.mark.parametrize("begins", [False, True], ids=["submit", "at the turn"])
def test_the_child_writer_records_and_settles_every_reply(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, begins: bool
) -> None:
    diagnostic = load_diagnostic(monkeypatch)
    for chunk in (None, 64):  # the thread writer, then the child handed every 64 calls
        measure = partial(diagnostic.one_run, tmp_path, replies=3000, begins=begins, chunk=chunk)
        run = anyio.run(measure)
        assert run["delivered"] == 3000 + 2000, chunk  # the measured replies and the warm-up
        assert run["rate"] > 0 and run["loop_us"] > 0, chunk
        if chunk is not None:  # smaller groups than a whole wave, more than one call each
            assert 1 < run["per_commit"] < 512, run
