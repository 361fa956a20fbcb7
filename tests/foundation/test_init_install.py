"""``chatbridge init`` writes a starter config that passes ``check``; ``install`` and
``uninstall`` run pip with the interpreter chatbridge runs on."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from bridge_core.cli import build_cli
from bridge_core.commands import install
from bridge_core.plugins import LOAD_PLUGINS_VAR, create_plugin_manager

# Plausible values for the variables every installed provider's starter profile reads.
VALUES = {"SLACK_BOT_TOKEN": "xoxb-1-2-3", "DISCORD_TOKEN": "d.t.x", "TEAMS_APP_PASSWORD": "pw"}


def test_init_writes_a_config_that_check_accepts_for_every_installed_provider(
    tmp_path: Path,
) -> None:
    providers = list(create_plugin_manager().providers)
    assert "console" in providers
    runner = CliRunner()
    args = ["init", "-d", str(tmp_path)] + [arg for name in providers for arg in ("-p", name)]
    result = runner.invoke(build_cli(), args)
    assert result.exit_code == 0, result.output
    config = tmp_path / "bridge.toml"
    parsed = tomllib.loads(config.read_text(encoding="utf-8"))
    assert set(parsed["profiles"]) == {f"{name}-bot" for name in providers}
    dotenv = (tmp_path / ".env.example").read_text(encoding="utf-8")
    wanted = [line[:-1] for line in dotenv.splitlines() if line.endswith("=") and line[0] != "#"]
    # Every env reference in the file is listed in .env.example, and nothing else is.
    referenced = {
        value["env"]
        for profile in parsed["profiles"].values()
        for value in profile.get("settings", {}).values()
        if isinstance(value, dict)
    }
    assert set(wanted) == referenced
    env = {name: VALUES.get(name, "value-for-" + name) for name in wanted}
    checked = runner.invoke(build_cli(), ["check", "-c", str(config), "--json"], env=env)
    for value in env.values():
        assert value not in checked.output  # secrets masked, as ever
    # Left to do: the required settings with no example, written "FILL IN". Every problem check
    # finds is one of those (a free-form one, such as Teams' app_id, may pass as it is).
    left = {
        f"profiles.{name}.settings.{key}"
        for name, profile in parsed["profiles"].items()
        for key, value in profile.get("settings", {}).items()
        if value == "FILL IN"
    }
    problems = {
        line.split(": ")[1] for line in checked.output.splitlines() if ": profiles." in line
    }
    assert problems <= left, checked.output
    assert checked.exit_code == (1 if problems else 0), checked.output
    # With those filled in, the whole file passes.
    examples = {"homeserver_url": '"https://matrix.example.org"', "user_id": '"@bot:example.org"'}
    text = config.read_text(encoding="utf-8")
    for where in problems:
        key = where.rsplit(".", 1)[1]
        value = examples.get(key, '"x"')
        text = text.replace(f'{key} = "FILL IN"', f"{key} = {value}", 1)
    # and the budget each profile's comment suggests is one that exists
    suggested = r'^# budget = ("[^"]*")(?=\s+# default: the provider)'
    text = re.sub(suggested, r"budget = \1", text, flags=re.MULTILINE)
    assert text.count("\nbudget = ") == len(providers)
    config.write_text(text, encoding="utf-8")
    checked = runner.invoke(build_cli(), ["check", "-c", str(config), "--json"], env=env)
    assert checked.exit_code == 0, checked.output
    assert set(json.loads(checked.output)["channels"]) == set(providers)


def test_init_without_a_provider_gives_a_console_config_that_runs_its_check(
    tmp_path: Path,
) -> None:
    runner = CliRunner(env={LOAD_PLUGINS_VAR: ""})
    assert runner.invoke(build_cli(), ["init", "-d", str(tmp_path)]).exit_code == 0
    checked = runner.invoke(build_cli(), ["check", "-c", str(tmp_path / "bridge.toml")])
    assert checked.exit_code == 0, checked.output
    again = runner.invoke(build_cli(), ["init", "-d", str(tmp_path)])
    assert again.exit_code == 1 and "already exist; pass --force" in again.output
    assert runner.invoke(build_cli(), ["init", "-d", str(tmp_path), "--force"]).exit_code == 0


def test_init_of_an_unknown_provider_says_what_is_installed_and_how_to_install(
    tmp_path: Path,
) -> None:
    result = CliRunner(env={LOAD_PLUGINS_VAR: ""}).invoke(
        build_cli(), ["init", "-p", "zulip", "-d", str(tmp_path)]
    )
    assert result.exit_code == 2
    assert "installed providers: console" in result.output
    assert "chatbridge install bridge-zulip" in result.output
    assert not (tmp_path / "bridge.toml").exists()


def test_install_and_uninstall_run_this_interpreters_pip(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[list[str]] = []

    def fake_run(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        calls.append(command)
        return subprocess.CompletedProcess(command, 3 if "broken" in command else 0)

    monkeypatch.setattr(install.subprocess, "run", fake_run)
    runner = CliRunner()
    assert runner.invoke(build_cli(), ["install", "-U", "bridge-slack"]).exit_code == 0
    assert runner.invoke(build_cli(), ["install", "-e", "./bridge-zulip"]).exit_code == 0
    assert runner.invoke(build_cli(), ["uninstall", "-y", "bridge-slack"]).exit_code == 0
    assert runner.invoke(build_cli(), ["install", "broken"]).exit_code == 3  # pip's status
    pip = [sys.executable, "-m", "pip"]
    assert calls == [
        [*pip, "install", "--upgrade", "bridge-slack"],
        [*pip, "install", "--editable", "./bridge-zulip"],
        [*pip, "uninstall", "--yes", "bridge-slack"],
        [*pip, "install", "broken"],
    ]
    refused = runner.invoke(build_cli(), ["uninstall", "bridge_core"])
    assert refused.exit_code == 2 and "chatbridge itself" in refused.output
    assert runner.invoke(build_cli(), ["install"]).exit_code == 2
    assert len(calls) == 4
