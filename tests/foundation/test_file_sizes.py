"""No source file grows past 600 lines (the developers' guide: one module, one idea; a file that
long is usually two ideas, and the split is easier while it is young).

Counted: the core, each plugin's package, the provider template, the benchmarks and the docs'
tooling. Not counted: the test suites (``tests/`` and each plugin's ``tests/``), whose modules
grow with the cases of one behaviour.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 600
COUNTED = ("bridge_core", "plugins", "cookiecutter-provider", "bench", "docs")


def source_files() -> list[Path]:
    found = []
    for top in COUNTED:
        for path in (ROOT / top).rglob("*.py"):
            parts = path.relative_to(ROOT).parts
            if "tests" in parts or any(part.endswith(".egg-info") for part in parts):
                continue
            found.append(path)
    return found


def test_every_source_file_is_at_most_600_lines() -> None:
    files = source_files()
    assert len(files) > 100  # the walk found the tree, so the check below can fail
    over = {
        str(path.relative_to(ROOT)): lines
        for path in files
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > LIMIT
    }
    assert over == {}, f"over {LIMIT} lines; split each along one idea: {over}"
