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
    environ.update(env or {})
    return subprocess.run(
        [str(CHATBRIDGE), *args], cwd=cwd, env=environ, capture_output=True, text=True, timeout=60
    )


def test_chatbridge_providers_lists_discord(tmp_path: Path) -> None:
    done = run("providers", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    listing = {p["name"]: p for p in json.loads(done.stdout)["providers"]}
    discord = listing["discord"]
    assert discord["distribution"] == "bridge-discord"
    assert discord["capabilities"]["edit"] is True
    assert discord["capabilities"]["max_length"] == 2000
    assert discord["budget"]["burst"] == 5


def test_chatbridge_check_accepts_a_discord_profile(tmp_path: Path) -> None:
    config = tmp_path / "bridge.toml"
    config.write_text(
        "[profiles.ops]\n"
        'provider = "discord"\n'
        'settings = { token = { env = "H6_TEST_DISCORD_TOKEN" }, inbound = true }\n'
        "[channels.ops]\n"
        'profile = "ops"\n'
        'channel_id = "111111111111111111"\n'
    )
    secret = "discord-token-never-printed"
    done = run("check", "-c", str(config), cwd=tmp_path, env={"H6_TEST_DISCORD_TOKEN": secret})
    assert done.returncode == 0, done.stdout + done.stderr
    assert secret not in done.stdout + done.stderr
