"""Helpers for end-to-end tests: ``chatbridge run`` as a real OS process.

Waiting is always on something observable (the ready file, a transcript line, the process
exiting), with a deadline, never a guessed sleep.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

CHATBRIDGE = [sys.executable, "-c", "from bridge_core.cli import main; main()"]


def wait_for(condition: Callable[[], Any], *, timeout: float = 20.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or condition}")
        time.sleep(0.02)


def transcript_lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.endswith("}"):  # a line being written by a killed process may be cut short
            out.append(json.loads(line))
    return out


@dataclass
class GatewayProcess:
    config: Path
    workdir: Path
    args: list[str] = field(default_factory=list)
    stdin: bool = False
    env: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None
    url: str = ""
    runs: int = 0
    _client: httpx.Client | None = None
    _ready_path: Path = Path()

    @property
    def log_path(self) -> Path:
        return self.workdir / f"gateway-{self.runs}.log"

    def start(self, *, wait: bool = True) -> GatewayProcess:
        self.runs += 1
        ready = self.workdir / f"ready-{self.runs}.json"
        ready.unlink(missing_ok=True)
        env = {**os.environ, "CHATBRIDGE_LOAD_PLUGINS": "", **self.env}
        with self.log_path.open("wb") as log:  # the child keeps its own copy of the handle
            self.process = subprocess.Popen(
                [*CHATBRIDGE, "run", "-c", str(self.config), "--ready-file", str(ready),
                 "--log-format", "json", *self.args],
                stdin=subprocess.PIPE if self.stdin else subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                env=env,
            )  # fmt: skip
        self._ready_path = ready
        if wait:
            self.start_wait()
        return self

    def start_wait(self) -> None:
        ready = self._ready_path
        info = wait_for(
            lambda: self._ready(ready), timeout=30, what=f"{ready} (log: {self.log_path})"
        )
        self.url = info["url"]

    def _ready(self, path: Path) -> dict[str, Any] | None:
        assert self.process is not None
        if self.process.poll() is not None:
            raise AssertionError(
                f"gateway exited with {self.process.returncode}: {self.log_path.read_text()}"
            )
        return json.loads(path.read_text()) if path.exists() else None

    @property
    def http(self) -> httpx.Client:
        """A keep-alive client for this run (a fresh httpx client costs ~100 ms to build)."""
        if self._client is None or str(self._client.base_url).rstrip("/") != self.url:
            if self._client is not None:
                self._client.close()
            self._client = httpx.Client(base_url=self.url, timeout=10)
        return self._client

    def post(self, path: str, body: Any, **kwargs: Any) -> httpx.Response:
        return self.http.post(path, json=body, **kwargs)

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.http.get(path, **kwargs)

    def say(self, line: str) -> None:
        assert self.process is not None and self.process.stdin is not None
        self.process.stdin.write(line.encode() + b"\n")
        self.process.stdin.flush()

    def signal(self, signum: int) -> None:
        assert self.process is not None
        self.process.send_signal(signum)

    def wait(self, timeout: float = 20) -> int:
        assert self.process is not None
        code = self.process.wait(timeout)
        self.close()
        return code

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        if self.process is not None and self.process.stdin is not None:
            self.process.stdin.close()

    def stop(self) -> int:
        self.signal(signal.SIGTERM)
        return self.wait()

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        self.wait()

    def log_records(self) -> list[dict[str, Any]]:
        records = []
        for path in sorted(self.workdir.glob("gateway-*.log")):
            for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
                if line.startswith("{"):
                    records.append(json.loads(line))
        return records


@pytest.fixture
def gateways() -> Iterator[list[GatewayProcess]]:
    started: list[GatewayProcess] = []
    yield started
    for gateway in started:
        if gateway.process is not None and gateway.process.poll() is None:
            gateway.process.kill()
            gateway.process.wait()
        gateway.close()


def console_config(
    path: Path,
    *,
    transcript: Path,
    ledger: str,
    budget: str = "{ burst = 3, per_second = 5.0, edit_spacing = 0.5 }",
    agent: str | None = None,
    inbound: bool = False,
    token_env: str | None = None,
    membership: str = "embedded",
    extra: str = "",
) -> Path:
    inbound_setting = ', inbound = "-", inbound_channel = "ops"' if inbound else ""
    lines = [
        "[profiles.con]",
        'provider = "console"',
        f'settings = {{ transcript = "{transcript}", output = "none", budget = {budget}'
        f"{inbound_setting} }}",
        "",
        "[channels.ops]",
        'profile = "con"',
        'channel_id = "ops"',
        "notify = { hold = 0.3 }",
    ]
    if agent:
        lines.append(f'agent = "{agent}"')
    lines += ["", "[stores]", f'ledger = "{ledger}"', f'membership = "{membership}"', ""]
    lines += ["[api]", "port = 0"]
    if token_env:
        lines.append(f'token = {{ env = "{token_env}" }}')
    path.write_text("\n".join(lines) + "\n" + extra)
    return path
