"""The installed distribution as the core sees it: `chatbridge providers` and `chatbridge check`
find the plugin through its packaged entry point (not an import of the test), so this fails if
the entry point was not packaged."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner, Result

from bridge_core.cli import build_cli


def run(*args: str, env: dict[str, str] | None = None) -> Result:
    # Only this distribution's plugins: its entry point must be found by the core's own loader
    # in the installed metadata (importlib.metadata), exactly as the chatbridge command does.
    environ = {"CHATBRIDGE_LOAD_PLUGINS": "bridge-teams", "CHATBRIDGE_STRICT_PLUGINS": "1"}
    environ.update(env or {})
    return CliRunner(env=environ).invoke(build_cli(), list(args), catch_exceptions=False)


def test_chatbridge_providers_lists_teams() -> None:
    done = run("providers", "--json")
    assert done.exit_code == 0, done.output
    listing = {p["name"]: p for p in json.loads(done.output)["providers"]}
    teams = listing["teams"]
    assert teams["distribution"] == "bridge-teams"
    assert teams["capabilities"]["edit"] is True
    assert teams["capabilities"]["length_unit"] == "json_ascii"
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
    done = run("check", "-c", str(config), env={"H6_TEST_TEAMS_PASSWORD": secret})
    assert done.exit_code == 0, done.output
    assert secret not in done.output
