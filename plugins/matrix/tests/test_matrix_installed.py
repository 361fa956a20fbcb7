"""The installed distribution as the core sees it: `chatbridge providers` and `chatbridge check`
find the plugin through its packaged entry point (not an import of the test), so this fails if
the entry point was not packaged."""

from __future__ import annotations

import json
from pathlib import Path

from bridge_matrix import MATRIX_BUDGET
from click.testing import CliRunner, Result

from bridge_core.cli import build_cli


def run(*args: str, env: dict[str, str] | None = None) -> Result:
    environ = {"CHATBRIDGE_LOAD_PLUGINS": "bridge-matrix", "CHATBRIDGE_STRICT_PLUGINS": "1"}
    environ.update(env or {})
    return CliRunner(env=environ).invoke(build_cli(), list(args), catch_exceptions=False)


def test_chatbridge_providers_lists_matrix() -> None:
    done = run("providers", "--json")
    assert done.exit_code == 0, done.output
    listing = {p["name"]: p for p in json.loads(done.output)["providers"]}
    matrix = listing["matrix"]
    assert matrix["distribution"] == "bridge-matrix"
    assert matrix["capabilities"]["edit"] is True
    assert matrix["capabilities"]["length_unit"] == "json_utf8"
    assert matrix["budget"]["burst"] == 9
    assert matrix["budget"]["per_second"] == 0.2


def test_chatbridge_check_accepts_a_matrix_profile(tmp_path: Path) -> None:
    config = tmp_path / "bridge.toml"
    config.write_text(
        "[profiles.ops]\n"
        'provider = "matrix"\n'
        'settings = { homeserver_url = "https://matrix.example.org", '
        'user_id = "@bridge:example.org", access_token = { env = "M16_TEST_TOKEN" }, '
        "inbound = true }\n"
        "[channels.ops]\n"
        'profile = "ops"\n'
        'channel_id = "!abcdefghijklmnop:example.org"\n'
    )
    secret = "syt_matrix-token-never-printed"
    done = run("check", "-c", str(config), env={"M16_TEST_TOKEN": secret})
    assert done.exit_code == 0, done.output
    assert secret not in done.output


def test_chatbridge_check_names_a_bad_user_id(tmp_path: Path) -> None:
    config = tmp_path / "bridge.toml"
    config.write_text(
        "[profiles.ops]\n"
        'provider = "matrix"\n'
        'settings = { homeserver_url = "https://matrix.example.org", user_id = "bridge", '
        'access_token = "t" }\n'
    )
    done = run("check", "-c", str(config))
    assert done.exit_code != 0
    assert "user_id" in done.output and "@bot:example.org" in done.output


def test_a_profile_of_any_provider_may_name_the_matrix_budget(tmp_path: Path) -> None:
    # bridge-matrix registers its budget as the preset "matrix" (register_budget_presets).
    config = tmp_path / "bridge.toml"
    config.write_text(
        '[profiles.term]\nprovider = "console"\nbudget = "matrix"\nsettings = { output = "none" }\n'
    )
    done = run("check", "-c", str(config), "--json")
    assert done.exit_code == 0, done.output
    assert json.loads(done.output)["profiles"]["term"]["budget"] == MATRIX_BUDGET.to_json()
