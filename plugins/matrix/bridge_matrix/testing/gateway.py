"""``chatbridge run`` as a real OS process, serving a room of a test homeserver.

``matrix_config`` writes a ``bridge.toml`` with one Matrix profile (the access token by env
reference) and one channel answered by an agent; ``GatewayProcess`` starts the gateway, waits
for its ready file, and stops or SIGKILLs it. Waiting is on something observable (the ready
file, the room's history), with a deadline.

Exception hierarchy: none of its own; ``AssertionError`` when the gateway exits while starting or
a wait runs out (these are test helpers).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from bridge_matrix.testing.synapse import MatrixUser

__all__ = ["CHATBRIDGE", "TOKEN_ENV", "GatewayProcess", "matrix_config", "wait_for"]

TOKEN_ENV = "BRIDGE_TEST_MATRIX_TOKEN"
CHATBRIDGE = [sys.executable, "-c", "from bridge_core.cli import main; main()"]

T = TypeVar("T")


def wait_for(condition: Callable[[], T | None], *, timeout: float, what: str) -> T:
    """Poll ``condition`` until it returns something truthy; ``AssertionError`` after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def matrix_config(
    path: Path,
    *,
    homeserver_url: str,
    bot: MatrixUser,
    room: str,
    ledger: str,
    membership: str = "embedded",
    budget: str = "{ burst = 3, per_second = 4.0 }",
    agent: str = "bridge_core.runtime.agents:echo_agent",
    sync_timeout: float = 2.0,
) -> Path:
    """A config for one Matrix channel answered by ``agent``; the token is read from
    ``TOKEN_ENV`` (``GatewayProcess`` sets it)."""
    lines = [
        "[profiles.mx]",
        'provider = "matrix"',
        f"budget = {budget}",
        "",
        "[profiles.mx.settings]",
        f'homeserver_url = "{homeserver_url}"',
        f'user_id = "{bot.user_id}"',
        f'access_token = {{ env = "{TOKEN_ENV}" }}',
        f'device_id = "{bot.device_id}"',
        "inbound = true",
        f"sync_timeout = {sync_timeout}",
        "call_deadline = 5.0",
        "",
        "[channels.room]",
        'profile = "mx"',
        f'channel_id = "{room}"',
        f'agent = "{agent}"',
        "",
        "[stores]",
        f'ledger = "{ledger}"',
        f'membership = "{membership}"',
        "",
        "[api]",
        "port = 0",
        "",
    ]
    path.write_text("\n".join(lines))
    return path


@dataclass
class GatewayProcess:
    """One gateway: ``start()`` (waits until it serves), ``stop()`` (SIGTERM), ``kill()``."""

    config: Path
    workdir: Path
    token: str = field(repr=False)
    args: list[str] = field(default_factory=list)
    process: subprocess.Popen[bytes] | None = None
    runs: int = 0

    @property
    def log_path(self) -> Path:
        return self.workdir / f"gateway-{self.runs}.log"

    def start(self, *, timeout: float = 30.0) -> GatewayProcess:
        self.runs += 1
        ready = self.workdir / f"ready-{self.runs}.json"
        ready.unlink(missing_ok=True)
        env = {**os.environ, "CHATBRIDGE_LOAD_PLUGINS": "bridge-matrix", TOKEN_ENV: self.token}
        with self.log_path.open("wb") as log:  # the child keeps its own copy of the handle
            self.process = subprocess.Popen(
                [*CHATBRIDGE, "run", "-c", str(self.config), "--ready-file", str(ready),
                 "--log-format", "json", *self.args],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                env=env,
            )  # fmt: skip
        wait_for(lambda: self._ready(ready), timeout=timeout, what=f"{ready} ({self.log_path})")
        return self

    def _ready(self, path: Path) -> dict[str, Any] | None:
        assert self.process is not None
        if self.process.poll() is not None:
            raise AssertionError(
                f"gateway exited with {self.process.returncode}: {self.log_path.read_text()}"
            )
        if not path.exists():
            return None
        try:
            return dict(json.loads(path.read_text()))
        except ValueError:  # being written
            return None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, *, timeout: float = 20.0) -> int:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout)

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def wait_until_receiving(self, *, timeout: float = 20.0) -> None:
        """Wait until this run's provider follows ``/sync`` (it logs so once it has a position):
        what a person writes from then on reaches it; on a first start, what came before is
        history, not turns."""
        wait_for(
            lambda: any(
                "receiving by /sync" in line
                for line in self.log_path.read_text(errors="replace").splitlines()
            ),
            timeout=timeout,
            what=f"the gateway to follow /sync ({self.log_path})",
        )

    def log_records(self) -> list[dict[str, Any]]:
        records = []
        for log in sorted(self.workdir.glob("gateway-*.log")):
            for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
                if line.startswith("{"):
                    records.append(json.loads(line))
        return records
