"""The chatbridge CLI through click's runner."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from bridge_core import __version__, cli
from bridge_core.cli import build_cli
from bridge_core.plugins import LOAD_PLUGINS_VAR

CONFIG = """
[profiles.term]
provider = "console"
budget = { burst = 3, per_hour = 3600 }   # the built-ins offer no platform presets
settings = { output = "none" }

[channels.ops]
profile = "term"
channel_id = "ops-room"
kinds = ["AgentFinished"]

[api]
token = { env = "BRIDGE_CLI_TEST_SECRET" }
"""


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner(env={LOAD_PLUGINS_VAR: ""})  # only the built-ins: independent of the machine


def test_version(runner: CliRunner) -> None:
    result = runner.invoke(build_cli(), ["--version"])
    assert result.exit_code == 0
    assert result.output == f"chatbridge, version {__version__}\n"


def test_providers_json_lists_console_with_capabilities_and_budget(runner: CliRunner) -> None:
    result = runner.invoke(build_cli(), ["providers", "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    console = next(p for p in payload["providers"] if p["name"] == "console")
    assert console["distribution"] == "bridge-core" and console["version"] == __version__
    assert console["capabilities"] == {
        "edit": True,
        "max_length": 4000,
        "length_unit": "characters",
        "threads": True,
        "inbound": True,
        "probe": True,
        "streaming": "edit",
    }
    assert set(console["budget"]) == {"burst", "per_second", "windows", "edit_spacing"}
    assert payload["broken"] == []


def test_providers_table(runner: CliRunner) -> None:
    result = runner.invoke(build_cli(), ["providers"], env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    assert "console" in result.output and "4000 characters" in result.output
    assert "unlimited" in result.output


def test_check_prints_the_resolved_config_with_secrets_masked(
    runner: CliRunner, tmp_path: Path
) -> None:
    path = tmp_path / "bridge.toml"
    path.write_text(CONFIG)
    env = {"BRIDGE_CLI_TEST_SECRET": "very-secret-token"}
    result = runner.invoke(build_cli(), ["check", "-c", str(path), "--json"], env=env)
    assert result.exit_code == 0, result.output
    assert "very-secret" not in result.output
    view = json.loads(result.output)
    assert view["profiles"]["term"]["provider"] == "console"
    assert view["profiles"]["term"]["budget"]["burst"] == 3
    assert view["profiles"]["term"]["settings"]["output"] == "none"
    assert view["api"]["token"] == "<secret from $BRIDGE_CLI_TEST_SECRET>"
    assert view["channels"]["ops"]["channel_id"] == "ops-room"
    assert view["channels"]["ops"]["notify"] == {"hold": 2.0, "threshold": 5, "window": 10.0}
    table_env = {**env, "CHATBRIDGE_CONFIG": str(path), "COLUMNS": "200"}
    table = runner.invoke(build_cli(), ["check"], env=table_env)
    assert table.exit_code == 0, table.output
    assert "is valid" in table.output and "ops-room" in table.output
    assert "very-secret" not in table.output


def test_check_fails_naming_the_file_and_key(runner: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "broken.toml"
    path.write_text('[channels.ops]\nprofile = "nobody"\nchannel_id = "C"\n')
    result = runner.invoke(build_cli(), ["check", "-c", str(path)])
    assert result.exit_code == 1
    assert f"{path}: channels.ops.profile: no profile named 'nobody'" in result.output


def test_check_without_a_file_says_how_to_give_one(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(build_cli(), ["check"], env={"CHATBRIDGE_CONFIG": None})
    assert result.exit_code == 1
    assert "bridge.toml: no such file; create it, pass -c PATH" in result.output


def test_plugins_json(runner: CliRunner) -> None:
    result = runner.invoke(build_cli(), ["plugins", "--all"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    builtin = next(p for p in payload["plugins"] if p["builtin"])
    assert builtin["hooks"] == ["register_providers"]
    assert builtin["name"] == "bridge_core.providers.console"
    assert json.loads(runner.invoke(build_cli(), ["plugins"]).output)["plugins"] == []


def test_listing_providers_does_not_import_the_other_commands() -> None:
    code = (
        "import sys; from click.testing import CliRunner; from bridge_core.cli import build_cli; "
        "r = CliRunner().invoke(build_cli(), ['providers', '--json']); assert r.exit_code == 0; "
        "print(sorted(m for m in ('bridge_core.runtime.gateway', 'trio', 'aiohttp.web') "
        "if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_a_command_module_with_a_broken_import_is_not_hidden(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def failing_import(name: str) -> object:
        raise ModuleNotFoundError("No module named 'some_dependency'", name="some_dependency")

    monkeypatch.setattr(cli.importlib, "import_module", failing_import)
    result = CliRunner().invoke(build_cli(("providers",)), ["providers"])
    assert isinstance(result.exception, ModuleNotFoundError)
    assert "some_dependency" in str(result.exception)


def test_every_listed_command_exposes_a_click_command() -> None:
    group = build_cli()
    ctx = click.Context(group)
    names = group.list_commands(ctx)
    assert {"providers", "check", "plugins", "run", "demo", "simulate", "ledger"} <= set(names)
    assert all(isinstance(group.get_command(ctx, name), click.Command) for name in names)


def test_top_names_a_bad_token_or_url_instead_of_a_traceback() -> None:
    from click.testing import CliRunner

    from bridge_core.cli import build_cli

    runner = CliRunner()
    result = runner.invoke(
        build_cli(), ["top", "--once", "--url", "http://127.0.0.1:1", "--token", "tök"]
    )
    assert result.exit_code == 2 and "--token" in result.output and "ASCII" in result.output
    result = runner.invoke(build_cli(), ["top", "--once", "--url", "http://[::1"])
    assert result.exit_code == 2 and "--url" in result.output, result.output


def test_top_brackets_an_ipv6_host_from_the_config(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from bridge_core.cli import build_cli

    config = tmp_path / "bridge.toml"
    config.write_text('[api]\nhost = "::1"\nport = 1\n')  # nothing listens on port 1
    result = CliRunner().invoke(build_cli(), ["top", "--once", "-c", str(config)])
    assert "Invalid port" not in result.output and not isinstance(result.exception, ValueError)
    assert result.exit_code == 1 and "[::1]:1" in result.output, result.output
