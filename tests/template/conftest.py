"""One generated provider project set up by exactly its README's commands, shared by the
template's README test and the first-hour walk (a virtual environment with two builds is the
slowest thing in the suite: it is made once)."""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from cookiecutter.main import cookiecutter

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / "cookiecutter-provider"


def clean_environment() -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        # The outer environment must not leak in: plugin filters, the active venv, pytest's own.
        if not key.startswith(("CHATBRIDGE_", "PYTEST_", "VIRTUAL_ENV", "PYTHONPATH"))
    }
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def readme_commands(project: Path) -> str:
    readme = (project / "README.md").read_text(encoding="utf-8")
    found = re.search(r"<!-- try-it -->\n```bash\n(.*?)```\n<!-- /try-it -->", readme, re.S)
    assert found is not None, "the generated README has no commands between try-it markers"
    return found.group(1)


@dataclass(frozen=True)
class ReadmeProject:
    """The generated project after its README's commands, and what they printed."""

    path: Path
    stdout: str

    @property
    def bin(self) -> Path:
        return self.path / ".venv" / "bin"


@pytest.fixture(scope="session")
def readme_project(tmp_path_factory: pytest.TempPathFactory) -> ReadmeProject:
    out = tmp_path_factory.mktemp("template")
    project = Path(cookiecutter(str(TEMPLATE), no_input=True, output_dir=str(out)))
    # Exactly the README's commands, in the project as generated; -v (through the environment,
    # not the commands) so the run names the tests it passed.
    ran = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", readme_commands(project)],
        cwd=project,
        env={**clean_environment(), "PYTEST_ADDOPTS": "-v"},
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert ran.returncode == 0, (
        f"the README's commands exited {ran.returncode}\n"
        f"--- stdout ---\n{ran.stdout[-6000:]}\n--- stderr ---\n{ran.stderr[-6000:]}"
    )
    return ReadmeProject(project, ran.stdout)
