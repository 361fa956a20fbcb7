"""Run every benchmark in bench/ and print one table: figure, value, floor, ratio, target, met.

    python bench/run_all.py              # the full run (a few minutes)
    python bench/run_all.py --quick      # a smoke run with small counts (CI), under a minute
    python bench/run_all.py --json       # the run as JSON on stdout, for machines
    python bench/run_all.py --save       # also write bench/results/<UTC time>-<commit>.json
    python bench/run_all.py --only bench_ownership --only bench_notify

Each module (``bench_*.py`` and ``plugin_startup.py``) runs in its own interpreter, one after
another, so one benchmark's threads, event loops and tracemalloc never touch the next one's
figures, and a module that crashes or hangs fails alone. The child calls the module's
``figures(quick=...)`` (``bench/_figures.py``) and hands the records back as JSON on its stdout;
whatever the benchmark prints itself goes to stderr, which the parent shows only for a module
that failed (or with ``--verbose``). The child freezes what the module's imports built before
it measures, as ``chatbridge run`` freezes start-up's objects once it serves (ADR 0156, ADR
0192); a module run directly (``python bench/bench_ledger.py``) does not, and its figures can
differ by the collector's scans of those objects. A target that is not met is reported, not an
error: the exit status is non-zero only when a module fails.

The machine is shared and has few cores, so every figure carries the load average when it was
taken, and the run records the load before and after, with the CPU count, Python and commit.
The disk is synced before each module, so no module's fsyncs wait on the writeback of files an
earlier module left dirty.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from _figures import Figure, table

__all__ = ["Run", "discover", "machine", "main", "run_module", "save"]

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"


@dataclass
class Run:
    """One run of some modules: their figures, those that failed, and the machine."""

    quick: bool
    machine: dict[str, Any]
    figures: list[Figure] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # module -> the end of its stderr
    seconds: dict[str, float] = field(default_factory=dict)  # module -> wall time

    def to_dict(self) -> dict[str, Any]:
        return {
            "quick": self.quick,
            "machine": self.machine,
            "seconds": self.seconds,
            "failed": self.failed,
            "figures": [figure.to_dict() for figure in self.figures],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Run:
        return cls(
            quick=data["quick"],
            machine=data["machine"],
            figures=[Figure.from_dict(item) for item in data["figures"]],
            failed=data.get("failed", {}),
            seconds=data.get("seconds", {}),
        )


def discover(folder: Path) -> list[Path]:
    """The benchmark modules in ``folder``: ``bench_*.py`` and ``plugin_startup.py``."""
    found = sorted(folder.glob("bench_*.py"))
    startup = folder / "plugin_startup.py"
    return [*found, startup] if startup.exists() else found


def _commit(folder: Path) -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=folder,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _dirty(folder: Path) -> bool:
    """Whether tracked files differ from the commit (figures of code nobody can check out)."""
    try:
        done = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=folder,
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return False
    return bool(done.stdout.strip())


def machine(folder: Path = HERE) -> dict[str, Any]:
    """What the figures depend on besides the code: cores, load, Python, commit."""
    return {
        "cpus": os.cpu_count(),
        "load_before": list(os.getloadavg()),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "commit": _commit(folder),
        "dirty": _dirty(folder),
        "started": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def run_module(path: Path, *, quick: bool, timeout: float) -> tuple[list[Figure], str | None]:
    """Run one module's ``figures`` in a child interpreter: (figures, None) or ([], why)."""
    command = [sys.executable, str(Path(__file__).resolve()), "--child", str(path)]
    if quick:
        command.append("--quick")
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as error:
        tail = (error.stderr or b"")[-2000:]
        text = tail.decode(errors="replace") if isinstance(tail, bytes) else tail
        return [], f"timed out after {timeout:g} s\n{text}"
    if done.returncode != 0:
        return [], f"exit status {done.returncode}\n{done.stderr[-4000:]}"
    try:
        return [Figure.from_dict(item) for item in json.loads(done.stdout)], None
    except (ValueError, TypeError) as error:
        return [], f"unreadable figures ({error!r})\n{done.stdout[-2000:]}"


def _child(path: Path, *, quick: bool) -> None:
    """In the child: import the module by path, call ``figures``, write JSON to stdout."""
    from bridge_core.commands.run import freeze_startup_objects  # the child's only: see below

    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    real_stdout = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):  # the benchmark's own printout
        spec.loader.exec_module(module)
        # Measured as in the gateway's process: ``chatbridge run`` freezes what start-up built
        # once it serves (ADR 0156), so no full collection scans the modules again; here the
        # module's imports are start-up (ADR 0192).
        freeze_startup_objects()
        found = module.figures(quick=quick)
    json.dump([figure.to_dict() for figure in found], real_stdout)
    real_stdout.flush()


def collect(paths: Sequence[Path], *, quick: bool, timeout: float, verbose: bool = False) -> Run:
    run = Run(quick=quick, machine=machine())
    for path in paths:
        # One module's files may still be being written back while the next one measures, and
        # a figure that fsyncs would pay for them; each module starts with nothing dirty.
        os.sync()
        started = time.perf_counter()
        figures, why = run_module(path, quick=quick, timeout=timeout)
        run.seconds[path.stem] = round(time.perf_counter() - started, 2)
        run.figures += figures
        if why is not None:
            run.failed[path.stem] = why
        if verbose or why is not None:
            took = run.seconds[path.stem]
            print(f"{path.stem}: {why or 'ok'} ({took:.1f} s)", file=sys.stderr)
    run.machine["load_after"] = list(os.getloadavg())
    return run


def save(run: Run, folder: Path = RESULTS) -> Path:
    """Write the run as ``<folder>/<UTC timestamp>-<short commit>.json``."""
    folder.mkdir(parents=True, exist_ok=True)
    stamp = run.machine["started"].replace("-", "").replace(":", "")
    path = folder / f"{stamp}-{run.machine['commit']}.json"
    path.write_text(json.dumps(run.to_dict(), indent=1, sort_keys=True) + "\n")
    return path


def report(run: Run) -> str:
    """The table, with the machine above it and the failures below."""
    info = run.machine
    before = ", ".join(f"{value:.2f}" for value in info["load_before"])
    after = ", ".join(f"{value:.2f}" for value in info.get("load_after", []))
    lines = [
        f"commit {info['commit']}, python {info['python']}, {info['cpus']} cpus, "
        f"load before {before}, after {after}, {'quick' if run.quick else 'full'} run",
        "",
        table(run.figures),
    ]
    met = [figure.met for figure in run.figures if figure.met is not None]
    lines.append("")
    lines.append(f"targets met: {sum(met)} of {len(met)}")
    for module, why in run.failed.items():
        lines.append(f"FAILED {module}: {why.splitlines()[0] if why else ''}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small counts, for a smoke run")
    parser.add_argument("--json", action="store_true", help="print the run as JSON")
    parser.add_argument("--save", action="store_true", help="write bench/results/<...>.json")
    parser.add_argument("--only", action="append", default=[], help="a module's name (repeat)")
    parser.add_argument("--bench-dir", type=Path, default=HERE, help=argparse.SUPPRESS)
    parser.add_argument("--results-dir", type=Path, default=RESULTS, help=argparse.SUPPRESS)
    parser.add_argument("--timeout", type=float, default=None, help="seconds a module may take")
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        _child(args.child, quick=args.quick)
        return 0
    paths = discover(args.bench_dir)
    if args.only:
        paths = [path for path in paths if path.stem in args.only]
    timeout = args.timeout or (120.0 if args.quick else 900.0)
    run = collect(paths, quick=args.quick, timeout=timeout, verbose=args.verbose)
    if args.json:
        print(json.dumps(run.to_dict(), indent=1, sort_keys=True))
    else:
        print(report(run))
    if args.save:
        saved = save(run, args.results_dir)
        print(f"saved {saved}", file=sys.stderr)
    return 1 if run.failed else 0


if __name__ == "__main__":
    sys.exit(main())
