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
    environ = {"CHATBRIDGE_LOAD_PLUGINS": "bridge-discord", "CHATBRIDGE_STRICT_PLUGINS": "1"}
    environ.update(env or {})
    return CliRunner(env=environ).invoke(build_cli(), list(args), catch_exceptions=False)


def test_chatbridge_providers_lists_discord() -> None:
    done = run("providers", "--json")
    assert done.exit_code == 0, done.output
    listing = {p["name"]: p for p in json.loads(done.output)["providers"]}
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
    done = run("check", "-c", str(config), env={"H6_TEST_DISCORD_TOKEN": secret})
    assert done.exit_code == 0, done.output
    assert secret not in done.output
