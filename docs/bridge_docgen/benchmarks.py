"""The benchmarks page: its tables and its two charts, drawn from the committed results.

``bench/run_all.py --save`` writes one JSON file a run under ``bench/results/`` (the machine,
the commit, every figure with its same-run floor, target and load average). From those files:

- ``results_table()``: the latest full run's figures (``<!-- generated: bench-table -->``);
- ``scale_table()``: its scale series, one row a figure, one column a size
  (``<!-- generated: bench-scale -->``);
- ``runs_table()``: every committed run, its machine and load (``<!-- generated: bench-runs -->``);
- ``over_time_svg()`` and ``scale_svg()``: the charts, hand-written SVG (no plotting library),
  committed as ``docs/operations/benchmarks-over-time.svg`` and ``benchmarks-scale.svg``;
  ``python docs/bridge_docgen/benchmarks.py`` writes them again, and a test checks that the
  committed files are what this module draws from the committed results.
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from collections.abc import Iterable, Sequence
from html import escape
from pathlib import Path
from types import ModuleType
from typing import Any

if not __package__:  # run as a script (python docs/bridge_docgen/benchmarks.py): docs/ on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bridge_docgen.text import cell


def _bench_module(name: str) -> ModuleType:
    """A module of ``bench/`` (not a package): the page writes figures as the benches print them,
    from the one ``format_number`` there."""
    path = Path(__file__).resolve().parents[2] / "bench" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"bridge_bench_{name.lstrip('_')}", path)
    assert spec is not None and spec.loader is not None
    if spec.name in sys.modules:
        return sys.modules[spec.name]
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while being made
    spec.loader.exec_module(module)
    return module


number = _bench_module("_figures").format_number

__all__ = [
    "CHARTS",
    "RESULTS",
    "load_runs",
    "number",
    "over_time_svg",
    "results_table",
    "runs_table",
    "scale_svg",
    "scale_table",
    "short",
    "write_charts",
]

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "bench" / "results"
CHARTS = REPO / "docs" / "operations"

Run = dict[str, Any]
Figure = dict[str, Any]


def load_runs(folder: Path = RESULTS) -> list[Run]:
    """Every committed run, oldest first (by the time it started)."""
    runs = [json.loads(path.read_text()) for path in sorted(folder.glob("*.json"))]
    return sorted(runs, key=lambda run: run["machine"]["started"])


def _latest(runs: Sequence[Run]) -> Run | None:
    """The latest full run, or the latest run when there is no full one."""
    full = [run for run in runs if not run["quick"]]
    return (full or list(runs) or [None])[-1]


def short(value: float) -> str:
    """A chart label: 1.95M, 12.3k, 0.42 (the tables keep the full figures)."""
    magnitude = abs(value)
    if magnitude >= 1e6:
        return f"{value / 1e6:.3g}M"
    if magnitude >= 1e4:
        return f"{value / 1e3:.3g}k"
    return number(value)


def _target(figure: Figure) -> str:
    if figure["target"] is None:
        return ""
    sign = "≥" if figure["higher_is_better"] else "≤"
    unit = "" if figure["floor"] is not None else f" {figure['unit']}"
    return f"{sign} {number(figure['target'])}{unit}"


def _met(figure: Figure) -> str:
    return {None: "", True: "yes", False: "**no**"}[figure["met"]]


def results_table(runs: Sequence[Run] | None = None) -> str:
    run = _latest(load_runs() if runs is None else runs)
    if run is None:
        return "No results are committed yet.\n"
    machine = run["machine"]
    lines = [
        f"Run of commit `{machine['commit']}` on {machine['started']}, {machine['cpus']} CPUs, "
        f"Python {machine['python']}, load average before "
        f"{', '.join(f'{v:.2f}' for v in machine['load_before'])} "
        f"({'quick' if run['quick'] else 'full'} run).",
        "",
        "| figure | value | floor | ratio | target | met | load | what |",
        "|---|---:|---:|---:|---|---|---:|---|",
    ]
    for figure in run["figures"]:
        if figure["n"] is not None:
            continue
        lines.append(
            "| "
            + " | ".join(
                cell(text)
                for text in (
                    f"`{figure['name']}`",
                    f"{number(figure['value'])} {figure['unit']}",
                    number(figure["floor"]),
                    number(figure["ratio"]),
                    _target(figure),
                    _met(figure),
                    f"{figure['load']:.2f}",
                    figure["label"],
                )
            )
            + " |"
        )
    return "\n".join(lines) + "\n"


def _series(run: Run) -> dict[tuple[str, str], list[Figure]]:
    """Scale series of one run: (name, axis) -> its figures by size."""
    out: dict[tuple[str, str], list[Figure]] = {}
    for figure in run["figures"]:
        if figure["n"] is not None:
            out.setdefault((figure["name"], figure["scale"]), []).append(figure)
    for figures in out.values():
        figures.sort(key=lambda figure: figure["n"])
    return out


def scale_table(runs: Sequence[Run] | None = None) -> str:
    run = _latest(load_runs() if runs is None else runs)
    if run is None:
        return "No results are committed yet.\n"
    lines = []
    by_axis: dict[str, list[tuple[str, list[Figure]]]] = {}
    for (name, axis), figures in _series(run).items():
        by_axis.setdefault(axis, []).append((name, figures))
    for axis, series in by_axis.items():
        sizes = sorted({figure["n"] for _, figures in series for figure in figures})
        lines += [
            f"| {axis} | " + " | ".join(f"{n:,}" for n in sizes) + " | unit | what |",
            "|---|" + "---:|" * len(sizes) + "---|---|",
        ]
        for name, figures in series:
            at = {figure["n"]: figure for figure in figures}
            cells = [number(at[n]["value"]) if n in at else "" for n in sizes]
            lines.append(
                f"| `{name}` | "
                + " | ".join(cells)
                + f" | {figures[0]['unit']} | {cell(figures[0]['label'])} |"
            )
        lines.append("")
    return "\n".join(lines)


def runs_table(runs: Sequence[Run] | None = None) -> str:
    runs = load_runs() if runs is None else runs
    lines = [
        "| started (UTC) | commit | run | CPUs | Python | load before | load after | targets met |",
        "|---|---|---|---:|---|---|---|---|",
    ]
    for run in runs:
        machine = run["machine"]
        met = [figure["met"] for figure in run["figures"] if figure["met"] is not None]
        lines.append(
            f"| {machine['started']} | `{machine['commit']}` | "
            f"{'quick' if run['quick'] else 'full'} | {machine['cpus']} | {machine['python']} | "
            f"{', '.join(f'{v:.2f}' for v in machine['load_before'])} | "
            f"{', '.join(f'{v:.2f}' for v in machine.get('load_after', []))} | "
            f"{sum(met)} of {len(met)} |"
        )
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- SVG

PANEL_W, PANEL_H, COLUMNS = 300, 150, 3
PAD_L, PAD_R, PAD_T, PAD_B = 44, 12, 30, 26
LINE, TARGET, MISSED = "#1f6feb", "#8a8a8a", "#cf222e"


def _svg(width: int, height: int, label: str, body: Iterable[str]) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" role="img" aria-label="{escape(label)}" '
        'font-family="sans-serif" font-size="10">\n'
        f'<rect width="{width}" height="{height}" fill="white"/>\n' + "\n".join(body) + "\n</svg>\n"
    )


def _panel(
    x0: float,
    y0: float,
    title: str,
    points: Sequence[tuple[float, float, bool]],
    *,
    xlabels: Sequence[tuple[float, str]],
    target: float | None,
    unit: str,
) -> list[str]:
    """One small chart: points (x in 0..1, y, hollow), the target as a dashed line."""
    inner_w, inner_h = PANEL_W - PAD_L - PAD_R, PANEL_H - PAD_T - PAD_B
    values = [y for _, y, _ in points] + ([target] if target is not None else [])
    top = max(values) * 1.15 if values and max(values) > 0 else 1.0
    parts = [
        f'<text x="{x0 + 4:.1f}" y="{y0 + 12:.1f}" font-weight="bold">{escape(title)}</text>',
        f'<text x="{x0 + 4:.1f}" y="{y0 + 23:.1f}" fill="#555">{escape(unit)}</text>',
        f'<rect x="{x0 + PAD_L}" y="{y0 + PAD_T}" width="{inner_w}" height="{inner_h}" '
        'fill="none" stroke="#ccc"/>',
    ]

    def sx(x: float) -> float:
        return x0 + PAD_L + inner_w * x

    def sy(y: float) -> float:
        return y0 + PAD_T + inner_h * (1 - y / top)

    for tick in (0.0, top / 2, top):
        parts.append(
            f'<text x="{x0 + PAD_L - 4:.1f}" y="{sy(tick) + 3:.1f}" text-anchor="end">'
            f"{escape(short(tick))}</text>"
        )
    for x, text in xlabels:
        # the labels at the edges are anchored inside the panel, so none is cut off
        anchor = "start" if x == 0 and len(xlabels) > 1 else "end" if x == 1 else "middle"
        parts.append(
            f'<text x="{sx(x):.1f}" y="{y0 + PANEL_H - 12:.1f}" text-anchor="{anchor}">'
            f"{escape(text)}</text>"
        )
    if target is not None:
        parts.append(
            f'<line x1="{sx(0):.1f}" y1="{sy(target):.1f}" x2="{sx(1):.1f}" y2="{sy(target):.1f}" '
            f'stroke="{TARGET}" stroke-dasharray="4 3"/>'
        )
    if len(points) > 1:
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y, _ in points)
        parts.append(f'<polyline points="{path}" fill="none" stroke="{LINE}"/>')
    for x, y, hollow in points:
        fill = "white" if hollow else LINE
        parts.append(
            f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{fill}" stroke="{LINE}"/>'
        )
    if points:
        x, y, _ = points[-1]
        parts.append(
            f'<text x="{min(sx(x), x0 + PANEL_W - PAD_R - 2):.1f}" y="{sy(y) - 6:.1f}" '
            f'text-anchor="end">{escape(short(y))}</text>'
        )
    return parts


def _grid(panels: Sequence[Any], label: str, draw: Any) -> str:
    rows = max(1, math.ceil(len(panels) / COLUMNS))
    width, height = PANEL_W * COLUMNS, PANEL_H * rows
    body: list[str] = []
    for index, panel in enumerate(panels):
        x0, y0 = PANEL_W * (index % COLUMNS), PANEL_H * (index // COLUMNS)
        body += draw(x0, y0, panel)
    if not panels:
        body.append('<text x="10" y="20">no results committed yet</text>')
    return _svg(width, height, label, body)


def _when(run: Run) -> str:
    return str(run["machine"]["started"])[5:16].replace("T", " ")


def over_time_svg(runs: Sequence[Run] | None = None) -> str:
    """Every figure with a target, run after run: its ratio to the floor (or its value when it
    has no floor), the target dashed; a hollow point is a quick run."""
    runs = load_runs() if runs is None else runs
    names: list[str] = []
    for run in runs:
        for figure in run["figures"]:
            if figure["target"] is not None and figure["n"] is None and figure["name"] not in names:
                names.append(figure["name"])
    span = max(1, len(runs) - 1)

    def draw(x0: float, y0: float, name: str) -> list[str]:
        points, target, unit = [], None, ""
        for index, run in enumerate(runs):
            for figure in run["figures"]:
                if figure["name"] == name and figure["n"] is None:
                    has_floor = figure["ratio"] is not None
                    y = figure["ratio"] if has_floor else figure["value"]
                    points.append((index / span if len(runs) > 1 else 0.5, y, run["quick"]))
                    target = figure["target"]
                    unit = "ratio to the floor" if has_floor else figure["unit"]
        xlabels = [(0.0 if len(runs) > 1 else 0.5, _when(runs[0]))]
        if len(runs) > 1:
            xlabels.append((1.0, _when(runs[-1])))
        return _panel(x0, y0, name, points, xlabels=xlabels, target=target, unit=unit)

    return _grid(names, "benchmark figures over time", draw)


def scale_svg(runs: Sequence[Run] | None = None) -> str:
    """The latest full run's scale series: each figure against the size of the work (log)."""
    run = _latest(load_runs() if runs is None else runs)
    series = list(_series(run).items()) if run is not None else []

    def draw(x0: float, y0: float, item: tuple[tuple[str, str], list[Figure]]) -> list[str]:
        (name, axis), figures = item
        logs = [math.log10(figure["n"]) for figure in figures]
        low, high = min(logs), max(logs)
        width = (high - low) or 1.0

        def at(value: float) -> float:
            return (value - low) / width if high > low else 0.5

        points = [
            (at(lg), figure["value"], False) for lg, figure in zip(logs, figures, strict=True)
        ]
        xlabels = [(at(lg), f"{figure['n']:,}") for lg, figure in zip(logs, figures, strict=True)]
        unit = f"{figures[0]['unit']} by {axis}"
        return _panel(x0, y0, name, points, xlabels=xlabels, target=None, unit=unit)

    return _grid(series, "benchmark figures against the size of the work", draw)


def write_charts(runs: Sequence[Run] | None = None, folder: Path = CHARTS) -> list[Path]:
    runs = load_runs() if runs is None else runs
    written = []
    for name, svg in (
        ("benchmarks-over-time.svg", over_time_svg(runs)),
        ("benchmarks-scale.svg", scale_svg(runs)),
    ):
        path = folder / name
        path.write_text(svg, encoding="utf-8")
        written.append(path)
    return written


if __name__ == "__main__":  # pragma: no cover - run by hand after committing a results file
    for path in write_charts():
        sys.stdout.write(f"wrote {path.relative_to(REPO)}\n")
