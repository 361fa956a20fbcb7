"""The README's two commands, which .ci/run and the docs site read between their markers."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"<!-- (\w+)-command -->\n```bash\n(.+?)\n```\n<!-- /\1-command -->", re.DOTALL)


def commands() -> dict[str, str]:
    return {m.group(1): m.group(2) for m in BLOCK.finditer((ROOT / "README.md").read_text())}


def test_exactly_two_one_line_commands_near_the_top() -> None:
    found = commands()
    assert set(found) == {"demo", "test"}
    assert all("\n" not in command for command in found.values())
    readme = (ROOT / "README.md").read_text()
    assert readme.index("<!-- /test-command -->") < 1500  # near the top


def test_each_command_makes_its_own_virtual_environment() -> None:
    for command in commands().values():
        assert command.startswith("python3 -m venv .venv && .venv/bin/pip install -e ")


def test_the_demo_command_runs_the_demo() -> None:
    assert commands()["demo"].endswith(".venv/bin/chatbridge demo")


def test_the_test_command_installs_every_plugin_and_runs_pytest() -> None:
    command = commands()["test"]
    assert "'.[test]'" in command and " plugins/*/ " in command
    # the whole suite, in two workers (pytest-xdist, from the test extra)
    assert command.endswith(".venv/bin/python -m pytest -n 2")
    plugin_dirs = [
        path for path in (ROOT / "plugins").iterdir() if path.is_dir() and path.name[0] not in "._"
    ]
    assert plugin_dirs and all((path / "pyproject.toml").is_file() for path in plugin_dirs)


def test_ci_extracts_the_same_test_command() -> None:
    script = (ROOT / ".ci" / "run").read_text()
    awk = re.search(r"TEST_COMMAND=\"\$\(awk '(.+?)' README\.md\)\"", script, re.DOTALL)
    assert awk is not None
    extracted = subprocess.run(
        ["awk", awk.group(1), str(ROOT / "README.md")], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert extracted == commands()["test"]
