"""Every real benchmark module imports and offers ``figures``: the benches are not run by the
suite (they are timed work), so without this a bench broken by a move elsewhere in the tree (a
name that moved into a plugin) is found only by the next full ``run_all``."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
MODULES = sorted([*BENCH.glob("bench_*.py"), BENCH / "plugin_startup.py"])


@pytest.mark.parametrize("path", MODULES, ids=lambda path: path.stem)
def test_the_module_imports_and_offers_figures(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BENCH))  # the benches import their siblings by name
    spec = importlib.util.spec_from_file_location(f"_bench_check_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    assert callable(getattr(module, "figures", None)), f"{path.name} has no figures(*, quick)"
