"""One generated provider project set up by exactly its README's commands, shared by the
template's README test and the first-hour walk (a virtual environment with two builds is the
slowest thing in the suite: it is made once).

The commands start when collection ends, in a thread, when a collected test uses
``readme_project``: they are a minute of pip (a virtual environment, two builds with isolation,
some thirty wheels unpacked) and the project's own tests, with no assertion on the machine's
timing, so they run beside the tests collected before tests/template, most of which are asleep
on a clock or a child process, and the fixture only waits for what is left of them."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest
from cookiecutter.main import cookiecutter

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / "cookiecutter-provider"
README_TIMEOUT = 900.0


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


class _ReadmeRun:
    """The README's commands in a freshly generated project, running in a thread."""

    def __init__(self, out: Path) -> None:
        self.project = Path(cookiecutter(str(TEMPLATE), no_input=True, output_dir=str(out)))
        # Exactly the README's commands, in the project as generated; -v (through the
        # environment, not the commands) so the run names the tests it passed.
        self.process = subprocess.Popen(
            ["bash", "-euo", "pipefail", "-c", readme_commands(self.project)],
            cwd=self.project,
            env={**clean_environment(), "PYTEST_ADDOPTS": "-v"},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # its own process group, so stopping it stops pip too
        )
        self.output: tuple[str, str] = ("", "")
        self.timed_out = False
        self.thread = threading.Thread(target=self._collect, name="readme-commands", daemon=True)
        self.thread.start()

    def _collect(self) -> None:
        # Read both pipes to the end (in a thread of its own, so a full pipe never stalls pip).
        try:
            self.output = self.process.communicate(timeout=README_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.timed_out = True
            self._kill()
            self.output = self.process.communicate()

    def _kill(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def result(self) -> ReadmeProject:
        self.thread.join()
        stdout, stderr = self.output
        assert not self.timed_out, f"the README's commands took over {README_TIMEOUT:.0f} s"
        assert self.process.returncode == 0, (
            f"the README's commands exited {self.process.returncode}\n"
            f"--- stdout ---\n{stdout[-6000:]}\n--- stderr ---\n{stderr[-6000:]}"
        )
        return ReadmeProject(self.project, stdout)

    def stop(self) -> None:
        if self.process.poll() is None:
            self._kill()
        self.thread.join()


_STARTED = pytest.StashKey[_ReadmeRun]()


def pytest_collection_finish(session: pytest.Session) -> None:
    if session.config.option.collectonly:
        return
    if any("readme_project" in getattr(item, "fixturenames", ()) for item in session.items):
        # The tmpdir plugin's factory (what the tmp_path_factory fixture returns): the project
        # lands under this session's basetemp like every other test's files.
        factory: pytest.TempPathFactory = session.config._tmp_path_factory  # type: ignore[attr-defined]
        session.config.stash[_STARTED] = _ReadmeRun(factory.mktemp("template"))


def pytest_sessionfinish(session: pytest.Session) -> None:
    # An interrupted session must not leave pip running.
    started = session.config.stash.get(_STARTED, None)
    if started is not None:
        started.stop()


@pytest.fixture(scope="session")
def readme_project(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> ReadmeProject:
    started = request.config.stash.get(_STARTED, None)
    if started is None:  # collected some other way: start the commands now
        started = request.config.stash[_STARTED] = _ReadmeRun(tmp_path_factory.mktemp("template"))
    return started.result()
