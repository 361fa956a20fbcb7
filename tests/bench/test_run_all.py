"""bench/run_all.py's machinery on tiny fake benchmarks: discovery, one child interpreter a
module, the figures handed back as JSON, the table, a failing module, the saved result file.
No real benchmark runs here (they are timed work, not tests)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RUN_ALL = REPO / "bench" / "run_all.py"

GOOD = """
from _figures import Figure

def figures(*, quick=False):
    print("chatter a benchmark prints")  # must not reach the parent's stdout
    return [
        Figure(name="fake.rate", value=90.0 if quick else 10.0, unit="ops/s", floor=100.0,
               target=0.8, label="a rate"),
        Figure(name="fake.p99", value=3.0, unit="ms", floor=1.0, target=2.0,
               higher_is_better=False),
        Figure(name="fake.rows", value=5.0, unit="s", scale="rows", n=1000),
    ]
"""

BROKEN = """
def figures(*, quick=False):
    raise RuntimeError("this bench is broken")
"""


def _bench_dir(tmp_path: Path, *, broken: bool) -> Path:
    folder = tmp_path / "bench"
    folder.mkdir()
    (folder / "_figures.py").write_text((REPO / "bench" / "_figures.py").read_text())
    (folder / "bench_good.py").write_text(GOOD)
    (folder / "helper_not_a_bench.py").write_text("raise SystemExit('never imported')\n")
    if broken:
        (folder / "bench_broken.py").write_text(BROKEN)
    return folder


def _run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(RUN_ALL), *map(str, args)], capture_output=True, text=True, timeout=30
    )


def test_quick_run_prints_one_table_and_saves_a_result_file(tmp_path: Path) -> None:
    folder = _bench_dir(tmp_path, broken=False)
    results = tmp_path / "results"
    done = _run("--quick", "--save", "--bench-dir", folder, "--results-dir", results)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "chatter" not in done.stdout
    assert "quick run" in lines[0] and "cpus" in lines[0]
    header = next(line for line in lines if line.startswith("figure"))
    assert header.split() == ["figure", "value", "floor", "ratio", "target", "met", "load"]
    rate = next(line for line in lines if line.startswith("fake.rate"))
    assert rate.split()[:7] == ["fake.rate", "90.0", "ops/s", "100", "0.9", ">=", "0.8"]
    assert rate.split()[7] == "yes"  # quick: 90 of a 100 floor, target 0.8
    p99 = next(line for line in lines if line.startswith("fake.p99"))
    assert p99.split()[4:8] == ["3.00", "<=", "2.00", "NO"]  # lower is better, 3x > 2x
    assert any(line.startswith("fake.rows[rows=1000]") for line in lines)
    assert "targets met: 1 of 2" in done.stdout

    (saved,) = results.glob("*.json")
    data = json.loads(saved.read_text())
    assert saved.name.endswith(f"-{data['machine']['commit']}.json")
    assert data["quick"] is True and data["failed"] == {}
    assert {"cpus", "load_before", "load_after", "python", "commit"} <= set(data["machine"])
    by_name = {figure["name"]: figure for figure in data["figures"]}
    assert by_name["fake.rate"]["ratio"] == 0.9 and by_name["fake.rate"]["met"] is True
    assert by_name["fake.rows"]["n"] == 1000 and by_name["fake.rows"]["met"] is None
    assert all(isinstance(figure["load"], float) for figure in data["figures"])


def test_json_mode_and_a_failing_module(tmp_path: Path) -> None:
    folder = _bench_dir(tmp_path, broken=True)
    done = _run("--json", "--bench-dir", folder)
    assert done.returncode == 1  # a module failed; unmet targets alone would not fail the run
    data = json.loads(done.stdout)
    assert data["quick"] is False
    assert list(data["failed"]) == ["bench_broken"]
    assert "this bench is broken" in data["failed"]["bench_broken"]
    assert [figure["value"] for figure in data["figures"] if figure["name"] == "fake.rate"] == [10]
    assert set(data["seconds"]) == {"bench_broken", "bench_good"}
