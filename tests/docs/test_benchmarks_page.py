"""The benchmarks page (docs/operations/benchmarks.md): its charts are what the generator draws
from the committed results, and its tables list every figure of the latest run."""

from __future__ import annotations

import html as html_module
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"


def _load() -> ModuleType:
    sys.path.insert(0, str(DOCS))
    try:
        spec = importlib.util.spec_from_file_location(
            "bridge_docgen.benchmarks", DOCS / "bridge_docgen" / "benchmarks.py"
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(DOCS))


benchmarks = _load()


def _figure(name: str, value: float, **extra: object) -> dict[str, object]:
    figure: dict[str, object] = {
        "name": name,
        "value": value,
        "unit": "ops/s",
        "floor": None,
        "target": None,
        "higher_is_better": True,
        "label": f"what {name} is",
        "scale": "",
        "n": None,
        "load": 0.5,
        "ratio": None,
        "met": None,
    }
    figure.update(extra)
    return figure


def _run(started: str, *, quick: bool, figures: list[dict[str, object]]) -> dict[str, object]:
    machine = {
        "cpus": 2,
        "load_before": [0.5, 0.4, 0.3],
        "load_after": [0.6, 0.5, 0.4],
        "python": "3.11.7",
        "platform": "Linux",
        "commit": "abc1234",
        "dirty": False,
        "started": started,
    }
    return {"quick": quick, "machine": machine, "seconds": {}, "failed": {}, "figures": figures}


def test_the_committed_charts_are_what_the_committed_results_draw() -> None:
    runs = benchmarks.load_runs()
    assert runs, "commit at least one bench/results/*.json (bench/run_all.py --save)"
    for name, draw in (
        ("benchmarks-over-time.svg", benchmarks.over_time_svg),
        ("benchmarks-scale.svg", benchmarks.scale_svg),
    ):
        committed = (benchmarks.CHARTS / name).read_text(encoding="utf-8")
        assert committed == draw(runs), (
            f"docs/operations/{name} is stale: run python docs/bridge_docgen/benchmarks.py"
        )


def test_the_tables_and_charts_show_every_figure() -> None:
    runs = [
        _run(
            "2026-11-30T10:00:00Z",
            quick=False,
            figures=[
                _figure("a.rate", 50.0, floor=100.0, target=0.8, ratio=0.5, met=False),
                _figure("a.sweep", 1.5, unit="s", target=2.0, higher_is_better=False, met=True),
                *[_figure("a.rows", 10.0 * n, scale="rows", n=n) for n in (1000, 10_000)],
            ],
        ),
        _run(
            "2026-12-01T10:00:00Z",
            quick=True,  # the latest full run is the one tabulated
            figures=[_figure("a.rate", 90.0, floor=100.0, target=0.8, ratio=0.9, met=True)],
        ),
    ]
    table = benchmarks.results_table(runs)
    assert "| `a.rate` | 50.0 ops/s | 100 | 0.5 | ≥ 0.8 | **no** | 0.50 |" in table
    assert "| `a.sweep` | 1.50 s |  |  | ≤ 2.00 s | yes |" in table
    assert "a.rows" not in table  # scale points go to the scale table
    scale = benchmarks.scale_table(runs)
    assert "| rows | 1,000 | 10,000 | unit | what |" in scale
    assert "| `a.rows` | 10,000 | 100,000 | ops/s |" in scale
    assert "| 2026-12-01T10:00:00Z | `abc1234` | quick |" in benchmarks.runs_table(runs)
    over_time = benchmarks.over_time_svg(runs)
    assert over_time.count('font-weight="bold"') == 2  # one panel per figure with a target
    assert over_time.count("<circle") == 3  # a.rate in both runs, a.sweep in one
    assert over_time.count('fill="white" stroke') == 1  # the quick run's point is hollow
    assert benchmarks.scale_svg(runs).count("<circle") == 2


def test_the_page_shows_the_latest_run_and_both_charts(site: Path) -> None:
    page = (site / "operations" / "benchmarks" / "index.html").read_text(encoding="utf-8")
    latest = benchmarks._latest(benchmarks.load_runs())
    text = html_module.unescape(page)
    for figure in latest["figures"]:
        assert figure["name"] in text, figure["name"]
    assert 'src="../benchmarks-over-time.svg"' in page
    assert 'src="../benchmarks-scale.svg"' in page
    assert (site / "operations" / "benchmarks-over-time.svg").is_file()
