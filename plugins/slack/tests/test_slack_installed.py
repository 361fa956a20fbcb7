"""Installed, the plugin is found through its entry point: ``chatbridge providers`` lists it and
a config selecting it passes ``chatbridge check`` (real CLI processes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from bridge_slack import SLACK_BUDGET

from bridge_core.plugins import create_plugin_manager

CHATBRIDGE = Path(sys.executable).parent / "chatbridge"
TOKEN = "xoxb-0000-installed-test-secret"

CONFIG = """
[profiles.ops-slack]
provider = "slack"

[profiles.ops-slack.settings]
bot_token = { env = "T_SLACK_TOKEN" }
signing_secret = { env = "T_SLACK_SIGNING" }

[profiles.quiet-slack]
provider = "slack"
budget = { preset = "slack", burst = 1, per_hour = 600 }

[profiles.quiet-slack.settings]
bot_token = { env = "T_SLACK_TOKEN" }
api_base_url = "https://slack-gov.com/api"

[channels.ops]
profile = "ops-slack"
channel_id = "C0123456"
"""


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    if not CHATBRIDGE.exists():
        pytest.fail(f"the chatbridge script is not installed next to {sys.executable}")
    environ = {**os.environ, "CHATBRIDGE_LOAD_PLUGINS": "bridge-slack", **(env or {})}
    return subprocess.run(
        [str(CHATBRIDGE), *args], capture_output=True, text=True, env=environ, timeout=60
    )


def test_the_registry_finds_slack_through_its_entry_point() -> None:
    manager = create_plugin_manager(environ={"CHATBRIDGE_LOAD_PLUGINS": "bridge-slack"})
    entry = manager.providers.get_entry("slack")
    assert entry.type.distribution == "bridge-slack"
    assert entry.type.capabilities.edit is True
    assert entry.type.budget == SLACK_BUDGET
    assert not manager.broken


def test_chatbridge_providers_lists_slack_with_edit_and_budget() -> None:
    result = run("providers", "--json")
    assert result.returncode == 0, result.stderr
    (slack,) = [p for p in json.loads(result.stdout)["providers"] if p["name"] == "slack"]
    assert slack["distribution"] == "bridge-slack"
    assert slack["capabilities"]["edit"] is True
    assert slack["capabilities"]["max_length"] == 3900
    assert slack["budget"] == SLACK_BUDGET.to_json()


def test_a_config_selecting_slack_passes_check(tmp_path: Path) -> None:
    config = tmp_path / "bridge.toml"
    config.write_text(CONFIG, encoding="utf-8")
    env = {"T_SLACK_TOKEN": TOKEN, "T_SLACK_SIGNING": "signing-secret-value"}
    result = run("check", "-c", str(config), "--json", env=env)
    assert result.returncode == 0, result.stderr
    view = json.loads(result.stdout)
    ops, quiet = view["profiles"]["ops-slack"], view["profiles"]["quiet-slack"]
    assert ops["distribution"] == "bridge-slack"
    assert ops["budget"] == SLACK_BUDGET.to_json()
    assert quiet["budget"]["burst"] == 1  # overridden per profile
    assert quiet["settings"]["api_base_url"] == "https://slack-gov.com/api/"
    assert TOKEN not in result.stdout + result.stderr
    assert "signing-secret-value" not in result.stdout + result.stderr


def test_check_names_a_bad_slack_setting_without_echoing_it(tmp_path: Path) -> None:
    config = tmp_path / "bridge.toml"
    config.write_text(CONFIG.replace("T_SLACK_TOKEN", "T_WRONG_KEY", 1), encoding="utf-8")
    env = {"T_WRONG_KEY": "sk-live-not-a-slack-token", "T_SLACK_TOKEN": TOKEN}
    env["T_SLACK_SIGNING"] = "x"
    result = run("check", "-c", str(config), env=env)
    assert result.returncode != 0
    said = result.stdout + result.stderr
    assert "profiles.ops-slack.settings.bot_token" in said
    assert "sk-live-not-a-slack-token" not in said
