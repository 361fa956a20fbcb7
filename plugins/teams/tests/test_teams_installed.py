"""The installed distribution as the core sees it: `chatbridge providers` and `chatbridge check`
run as real subprocesses, so this fails if the entry point was not packaged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

CHATBRIDGE = Path(sys.executable).with_name("chatbridge")


def run(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("CHATBRIDGE_")}
    # Only this distribution's plugins: the entry point must be found by the core's own loader.
    environ["CHATBRIDGE_LOAD_PLUGINS"] = "bridge-teams"
    environ.update(env or {})
    return subprocess.run(
        [str(CHATBRIDGE), *args], cwd=cwd, env=environ, capture_output=True, text=True, timeout=60
    )


def test_chatbridge_providers_lists_teams(tmp_path: Path) -> None:
    done = run("providers", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    listing = {p["name"]: p for p in json.loads(done.stdout)["providers"]}
    teams = listing["teams"]
    assert teams["distribution"] == "bridge-teams"
    assert teams["capabilities"]["edit"] is True
    assert teams["capabilities"]["length_unit"] == "bytes"
    assert {"limit": 7, "seconds": 1.0} in teams["budget"]["windows"]


def test_chatbridge_check_accepts_a_teams_profile(tmp_path: Path) -> None:
    config = tmp_path / "bridge.toml"
    config.write_text(
        "[profiles.ops]\n"
        'provider = "teams"\n'
        'settings = { app_id = "app-1", app_password = { env = "H6_TEST_TEAMS_PASSWORD" }, '
        'service_url = "https://smba.trafficmanager.net/teams/" }\n'
        "[channels.ops]\n"
        'profile = "ops"\n'
        'channel_id = "19:abc@thread.tacv2"\n'
    )
    secret = "teams-password-never-printed"
    done = run("check", "-c", str(config), cwd=tmp_path, env={"H6_TEST_TEAMS_PASSWORD": secret})
    assert done.returncode == 0, done.stdout + done.stderr
    assert secret not in done.stdout + done.stderr
