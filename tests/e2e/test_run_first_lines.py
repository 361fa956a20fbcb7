"""What ``chatbridge run`` writes before it serves, and when it cannot start: every line JSON in
JSON mode (plugin load errors included), one clear line instead of a traceback, ISO 8601 dates in
text mode, and once at start what it serves."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
from pathlib import Path

from bridge_core.testing.plugin_site import write_plugin

from .conftest import CHATBRIDGE, GatewayProcess, console_config, wait_for

_BROKEN = "raise RuntimeError('boom: this plugin cannot be imported')\n"


def _free_port() -> int:
    # A port nothing listens on: bound, then closed, so a connect is refused at once.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _broken_plugin(site: Path) -> Path:
    return write_plugin(
        site,
        distribution="bridge-firsthour-broken",
        version="0.1.0",
        provider="firsthour-broken",
        source=_BROKEN,
    )


def _run(
    args: list[str], *, env: dict[str, str], timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CHATBRIDGE, "run", *args],
        env={**os.environ, "CHATBRIDGE_LOAD_PLUGINS": "", **env},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_json_mode_writes_only_json_even_a_plugin_error_and_a_config_error(tmp_path: Path) -> None:
    site = _broken_plugin(tmp_path / "site")
    config = tmp_path / "bridge.toml"
    config.write_text('[profiles.x]\nprovider = "nope"\n', encoding="utf-8")
    ran = _run(
        ["-c", str(config), "--log-format", "json"],
        env={"PYTHONPATH": str(site), "CHATBRIDGE_LOAD_PLUGINS": "bridge-firsthour-broken"},
    )
    assert ran.returncode == 1
    lines = (ran.stdout + ran.stderr).splitlines()
    records = [json.loads(line) for line in lines]  # each line parses, or this raises
    assert "boom: this plugin cannot be imported" in records[0]["msg"]
    assert records[0]["level"] == "error"
    assert "no provider named 'nope'" in records[-1]["msg"]
    assert len(records) == 2, records


def test_redis_unreachable_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    config = console_config(
        tmp_path / "bridge.toml",
        transcript=tmp_path / "t.jsonl",
        ledger=str(tmp_path / "b.sqlite3"),
        membership=f"redis://127.0.0.1:{_free_port()}/0",
    )
    ran = _run(["-c", str(config)], env={})
    assert ran.returncode == 1
    assert "Traceback" not in ran.stderr, ran.stderr
    assert ran.stderr.startswith("Error: cannot reach Redis at redis://127.0.0.1:"), ran.stderr
    assert len(ran.stderr.strip().splitlines()) == 1, ran.stderr


def test_a_bogus_log_level_is_a_usage_error() -> None:
    ran = _run(["--log-level", "bogus"], env={})
    assert ran.returncode == 2
    assert "Traceback" not in ran.stderr
    assert "Invalid value for '--log-level': 'bogus' is not one of" in ran.stderr


def test_text_logs_carry_an_iso_date_in_utc_and_say_once_what_is_served(
    tmp_path: Path, gateways: list[GatewayProcess]
) -> None:
    config = console_config(
        tmp_path / "bridge.toml",
        transcript=tmp_path / "t.jsonl",
        ledger=str(tmp_path / "b.sqlite3"),
        agent="bridge_core.runtime.agents:echo_agent",
    )
    ready = tmp_path / "ready.json"
    log = tmp_path / "gateway.log"
    with log.open("wb") as stderr:
        process = subprocess.Popen(
            [*CHATBRIDGE, "run", "-c", str(config), "--ready-file", str(ready)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env={**os.environ, "CHATBRIDGE_LOAD_PLUGINS": ""},
        )
    try:
        # The ready file is written after the stores line is logged: wait for both, not one.
        wait_for(lambda: "stores: ledger" in log.read_text(), what=f"the stores line in {log}")
        wait_for(ready.exists, what=f"{ready} (written atomically once the gateway serves)")
        ready_info = json.loads(ready.read_text())
        url, gateway_id = ready_info["url"], ready_info["id"]
        process.send_signal(signal.SIGTERM)
        assert process.wait(20) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    lines = log.read_text(encoding="utf-8").splitlines()
    stamp = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (INFO|WARNING|ERROR|DEBUG) ")
    assert lines and all(stamp.match(line) for line in lines), lines
    serving = [line for line in lines if " serving " in line]
    assert len(serving) == 1, lines
    assert f"bridge_core.runtime: gateway {gateway_id} serving 1 channel(s) on {url}" in serving[0]
    assert any("ledger boot sweep: nothing to send" in line for line in lines), lines
    assert not any("SweepReport(" in line for line in lines), lines
    channel = [line for line in lines if "channel ops: console ops" in line]
    assert len(channel) == 1 and "agent bridge_core.runtime.agents:echo_agent" in channel[0], lines
    assert any("stores: ledger " in line and "membership embedded" in line for line in lines)
