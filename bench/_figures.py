"""Benchmark figures: the record every bench module returns, and the one table they print.

Each ``bench/bench_*.py`` module has ``figures(*, quick: bool = False) -> list[Figure]``: it runs
the benchmark and returns what it measured, each figure with the floor measured in the same run
and the target the project set for it. ``python bench/bench_x.py`` still runs one alone (its
own printout, then this table); ``bench/run_all.py`` runs every module in its own interpreter
and gathers the figures as JSON (``Figure.to_dict``), so nothing parses printed text.

A figure's ``ratio`` is ``value / floor``; its ``target`` applies to the ratio when there is a
floor, to the value when there is none (an absolute bound, e.g. "boot sweep under 2 s").
``higher_is_better`` says which side of the target is met (throughput: above; latency, seconds,
memory: below). A scale figure names its axis (``scale="channels"``) and the amount of work
(``n=100``): the figures sharing a name and an axis are one curve on the docs page.

Every figure carries the 1-minute load average when it was taken: on a shared 2-core machine
a ratio moves with the load, and a figure without its load cannot be judged.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = [
    "HEADER",
    "Figure",
    "best_of_rounds",
    "format_number",
    "load_now",
    "print_table",
    "rows",
    "table",
]


def load_now() -> float:
    """The 1-minute load average (what ``uptime`` shows first)."""
    return os.getloadavg()[0]


@dataclass(frozen=True, kw_only=True)
class Figure:
    """One measured figure, with its same-run floor and its target."""

    name: str  # stable across runs: "ownership.redis_log" (module.figure)
    value: float
    unit: str  # "turns/s", "ms", "us", "s", "KiB", ...
    floor: float | None = None  # the same work's floor, same unit, measured in the same run
    target: float | None = None  # of the ratio when there is a floor, else of the value
    higher_is_better: bool = True
    label: str = ""  # what was measured, for people
    scale: str = ""  # the work axis of a scale series ("channels", "rows", "members")
    n: int | None = None  # the amount of work on that axis
    load: float = field(default_factory=load_now)

    @property
    def ratio(self) -> float | None:
        if self.floor is None or self.floor == 0:
            return None
        return self.value / self.floor

    @property
    def met(self) -> bool | None:
        """Whether the target is met; None when the figure has no target."""
        if self.target is None:
            return None
        measured = self.ratio if self.floor is not None else self.value
        if measured is None or math.isnan(measured):
            return False
        return measured >= self.target if self.higher_is_better else measured <= self.target

    @property
    def key(self) -> str:
        """The name, with the scale point when there is one: unique within a run."""
        return self.name if self.n is None else f"{self.name}[{self.scale}={self.n}]"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ratio": self.ratio, "met": self.met}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Figure:
        fields = {k: v for k, v in data.items() if k not in ("ratio", "met")}
        return cls(**fields)


def format_number(value: float | None) -> str:
    """Three significant figures at most, thousands separated: tables, not lab notes."""
    if value is None:
        return ""
    if value == 0 or math.isnan(value) or math.isinf(value):
        return f"{value:g}"
    magnitude = abs(value)
    if magnitude >= 1000:
        return f"{value:,.0f}"
    if magnitude >= 100:
        return f"{value:.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def best_of_rounds(what: str, rounds: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """The highest of each rate over ``rounds`` (a figure and its floors, each measured once a
    round), every round printed: on a shared machine a disturbance only ever slows a round, so
    the best round of each side is the machine's own figure."""
    for key in rounds[0]:
        print(f"{what}, {key}, rounds: " + ", ".join(format_number(r[key]) for r in rounds))
    return {key: max(r[key] for r in rounds) for key in rounds[0]}


def _target(figure: Figure) -> str:
    if figure.target is None:
        return ""
    sign = ">=" if figure.higher_is_better else "<="
    number = format_number(figure.target)
    return f"{sign} {number}" + ("" if figure.floor is not None else f" {figure.unit}")


def _met(figure: Figure) -> str:
    return {None: "", True: "yes", False: "NO"}[figure.met]


HEADER = ("figure", "value", "floor", "ratio", "target", "met", "load")


def rows(figures: Iterable[Figure]) -> list[tuple[str, ...]]:
    """The table's cells, one tuple a figure (``HEADER`` order)."""
    return [
        (
            figure.key,
            f"{format_number(figure.value)} {figure.unit}",
            format_number(figure.floor),
            format_number(figure.ratio),
            _target(figure),
            _met(figure),
            f"{figure.load:.2f}",
        )
        for figure in figures
    ]


def table(figures: Iterable[Figure]) -> str:
    """A plain-text table, columns padded to fit."""
    cells = [HEADER, *rows(figures)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(HEADER))]
    lines = []
    for number, row in enumerate(cells):
        lines.append(
            "  ".join(
                cell.ljust(width) if i == 0 else cell.rjust(width)
                for i, (cell, width) in enumerate(zip(row, widths, strict=True))
            ).rstrip()
        )
        if number == 0:
            lines.append("  ".join("-" * width for width in widths))
    return "\n".join(lines)


def print_table(figures: Iterable[Figure]) -> None:
    print(table(figures), flush=True)
