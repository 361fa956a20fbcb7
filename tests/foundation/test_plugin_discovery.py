"""Plugin discovery through real entry points of test distributions pip-installed for the test."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from bridge_slack import SLACK_BUDGET

from bridge_core import Capabilities, ChatProvider
from bridge_core.hookspecs import ProviderType, hookimpl
from bridge_core.plugins import (
    LOAD_PLUGINS_VAR,
    TRACE_HOOKS_VAR,
    PluginLoadError,
    ProviderNameClash,
    UnknownProvider,
    create_plugin_manager,
    normalize_distribution_name,
)
from bridge_core.providers.console import ConsoleSettings


def only(*distributions: str) -> dict[str, str]:
    return {LOAD_PLUGINS_VAR: ",".join(distributions)}


def test_a_real_entry_point_registers_its_provider(installed_plugins: Path) -> None:
    manager = create_plugin_manager(environ=only("bridge-echotest"))
    assert manager.broken == []
    assert list(manager.providers) == ["console", "echotest"]
    entry = manager.providers.get_entry("echotest")
    assert (entry.distribution, entry.version) == ("bridge-echotest", "1.2.3")
    assert entry.type.distribution == "bridge-echotest"
    assert entry.type.capabilities.max_length == 300
    loaded = {plugin.distribution: plugin for plugin in manager.plugins()}
    assert loaded["bridge-echotest"].hooks == ("register_providers",)
    assert loaded["bridge-echotest"].builtin is False
    assert loaded["bridge-core"].builtin is True


def test_console_is_a_builtin_plugin_through_the_same_hook() -> None:
    manager = create_plugin_manager(load_entry_points=False)
    console = manager.providers.get_entry("console")
    assert console.distribution == "bridge-core"
    assert console.type.settings_model is ConsoleSettings
    assert console.type.capabilities.edit and console.type.capabilities.threads


def test_an_empty_load_variable_loads_only_the_builtins(installed_plugins: Path) -> None:
    manager = create_plugin_manager(environ={LOAD_PLUGINS_VAR: ""})
    assert list(manager.providers) == ["console"]
    assert manager.broken == []
    assert "bridge-echotest" in manager.not_loaded
    with pytest.raises(UnknownProvider) as caught:
        manager.providers.get("echotest")
    assert "bridge-echotest is installed but CHATBRIDGE_LOAD_PLUGINS leaves it out" in str(
        caught.value
    )


def test_the_load_variable_normalises_distribution_names(installed_plugins: Path) -> None:
    manager = create_plugin_manager(environ={LOAD_PLUGINS_VAR: " Bridge_EchoTest , "})
    assert "echotest" in manager.providers


def test_unset_variable_loads_every_plugin(installed_plugins: Path) -> None:
    manager = create_plugin_manager(environ={})
    distributions = {plugin.distribution for plugin in manager.plugins()}
    assert {"bridge-echotest", "bridge-clashtest"} <= distributions
    assert {b.distribution for b in manager.broken} >= {"bridge-brokentest", "bridge-typotest"}


def test_a_broken_plugin_is_reported_once_and_the_rest_load(
    installed_plugins: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="bridge_core.plugins"):
        manager = create_plugin_manager(environ=only("bridge-brokentest", "bridge-echotest"))
        assert "echotest" in manager.providers  # the registry is built without re-reporting
    assert len(manager.broken) == 1
    broken = manager.broken[0]
    assert (broken.distribution, broken.version) == ("bridge-brokentest", "0.0.1")
    assert broken.entry_point == "brokentest = bridge_brokentest"
    assert broken.error_type == "RuntimeError"
    assert "boom" in broken.error
    records = [r for r in caplog.records if "bridge-brokentest" in r.getMessage()]
    assert len(records) == 1
    assert "bridge-brokentest 0.0.1" in records[0].getMessage()


def test_strict_mode_reraises_a_broken_plugin(installed_plugins: Path) -> None:
    with pytest.raises(PluginLoadError) as caught:
        create_plugin_manager(strict=True, environ=only("bridge-brokentest"))
    assert caught.value.broken.distribution == "bridge-brokentest"
    assert isinstance(caught.value.__cause__, RuntimeError)


def test_a_misspelled_hook_is_caught_by_check_pending_and_unregistered(
    installed_plugins: Path,
) -> None:
    manager = create_plugin_manager(environ=only("bridge-typotest"))
    assert [b.distribution for b in manager.broken] == ["bridge-typotest"]
    assert manager.broken[0].error_type == "PluginValidationError"
    assert "register_provider" in manager.broken[0].error
    assert "bridge-typotest" not in {p.distribution for p in manager.plugins()}
    manager.pm.check_pending()  # nothing half-registered is left behind


def test_two_plugins_claiming_one_name_is_an_error_naming_both(installed_plugins: Path) -> None:
    manager = create_plugin_manager(environ=only("bridge-echotest", "bridge-clashtest"))
    with pytest.raises(ProviderNameClash) as caught:
        _ = manager.providers
    message = str(caught.value)
    assert "'echotest'" in message
    assert "bridge-echotest 1.2.3" in message and "bridge-clashtest 0.9.0" in message
    assert LOAD_PLUGINS_VAR in message


class _ConsoleImpostor:
    @hookimpl
    def register_providers(self, register: Any) -> None:
        register(
            ProviderType(
                name="console",
                capabilities=Capabilities(edit=False, max_length=10),
                budget=SLACK_BUDGET,
                settings_model=ConsoleSettings,
                factory=lambda settings, context: ChatProvider(),
            )
        )


def test_a_plugin_cannot_take_the_builtin_console_name() -> None:
    manager = create_plugin_manager(extra_plugins=[_ConsoleImpostor()], load_entry_points=False)
    with pytest.raises(ProviderNameClash, match="bridge-core"):
        _ = manager.providers


class _WrongArgument:
    @hookimpl
    def register_providers(self, register: Any, colour: str) -> None:
        raise AssertionError("never called")


def test_a_failed_register_is_unregistered_and_reported() -> None:
    plugin = _WrongArgument()
    manager = create_plugin_manager(extra_plugins=[plugin], load_entry_points=False)
    assert not manager.pm.is_registered(plugin)
    assert manager.broken[0].error_type == "PluginValidationError"
    assert "colour" in manager.broken[0].error
    with pytest.raises(PluginLoadError):
        create_plugin_manager(
            extra_plugins=[_WrongArgument()], load_entry_points=False, strict=True
        )


class _RegistersJunk:
    @hookimpl
    def register_providers(self, register: Any) -> None:
        register("slack")


def test_a_plugin_whose_hook_raises_is_reported_and_others_survive() -> None:
    manager = create_plugin_manager(extra_plugins=[_RegistersJunk()], load_entry_points=False)
    assert list(manager.providers) == ["console"]
    assert manager.broken[0].error_type == "TypeError"
    assert "takes a ProviderType" in manager.broken[0].error


def test_an_unknown_provider_says_what_is_installed_and_how_to_install() -> None:
    manager = create_plugin_manager(load_entry_points=False)
    with pytest.raises(UnknownProvider) as caught:
        manager.providers.get("slack")
    assert isinstance(caught.value, LookupError)
    assert "installed providers: console" in str(caught.value)
    assert "chatbridge install bridge-slack" in str(caught.value)


def test_a_broken_distribution_is_named_when_its_provider_is_asked_for(
    installed_plugins: Path,
) -> None:
    manager = create_plugin_manager(environ=only("bridge-brokentest"))
    with pytest.raises(UnknownProvider, match="bridge-brokentest is installed but broken"):
        manager.providers.get("brokentest")


def test_trace_variable_logs_every_hook_call(capsys: pytest.CaptureFixture[str]) -> None:
    manager = create_plugin_manager(load_entry_points=False, environ={TRACE_HOOKS_VAR: "1"})
    _ = manager.providers
    err = capsys.readouterr().err
    assert "[hook] register_providers(register=" in err
    assert "bridge_core.providers.console" in err
    assert "[hook] register_providers ok" in err


def test_no_hook_runs_at_import() -> None:
    code = (
        "import pluggy, sys\n"
        "calls = []\n"
        "original = pluggy.PluginManager.__init__\n"
        "def spy(self, *a, **k):\n"
        "    calls.append(a)\n"
        "    original(self, *a, **k)\n"
        "pluggy.PluginManager.__init__ = spy\n"
        "import bridge_core.cli, bridge_core.plugins, bridge_core.config\n"
        "print(len(calls))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "0"


def test_the_cli_lists_an_installed_distribution_in_a_fresh_process(plugin_site: Path) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": str(plugin_site),
        LOAD_PLUGINS_VAR: "bridge-echotest,bridge-brokentest",
    }
    result = subprocess.run(
        [sys.executable, "-c", "from bridge_core.cli import main; main()", "providers", "--json"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    payload = json.loads(result.stdout)
    names = {p["name"]: p for p in payload["providers"]}
    assert names["echotest"]["distribution"] == "bridge-echotest"
    assert names["echotest"]["capabilities"]["length_unit"] == "bytes"
    assert names["echotest"]["budget"]["burst"] == SLACK_BUDGET.burst
    assert [b["distribution"] for b in payload["broken"]] == ["bridge-brokentest"]
    assert "bridge-brokentest 0.0.1" in result.stderr  # logged once, loudly


def test_distribution_names_normalise_like_pep_503() -> None:
    assert normalize_distribution_name("Bridge_Slack") == "bridge-slack"
    assert normalize_distribution_name("bridge..slack") == "bridge-slack"


def test_registering_one_module_twice_keeps_the_first_registration() -> None:
    from bridge_core.providers import console

    manager = create_plugin_manager(load_entry_points=False)
    assert manager.register(console, name="again", builtin=False) is False
    assert manager.pm.is_registered(console)  # the built-in registration survives
    assert "already registered" in manager.broken[0].error
    assert "console" in manager.providers


def test_a_plugin_whose_hook_failed_is_named_when_its_provider_is_asked_for() -> None:
    manager = create_plugin_manager(load_entry_points=False)
    manager.register(_RegistersJunk(), name="junk", distribution="bridge-junk", builtin=False)
    with pytest.raises(UnknownProvider, match="bridge-junk is installed but broken"):
        manager.providers.get("junk")


def test_a_plugin_whose_hook_raised_is_listed_as_broken_with_its_error() -> None:
    manager = create_plugin_manager(load_entry_points=False)
    manager.register(_RegistersJunk(), name="junk", distribution="bridge-junk", builtin=False)
    listed = {plugin.name: plugin.to_json() for plugin in manager.plugins()}
    assert listed["junk"]["status"] == "broken"
    assert listed["junk"]["error"].startswith("TypeError: register() takes a ProviderType")
    assert listed["bridge_core.providers.console"]["status"] == "ok"
    assert len(manager.broken) == 1  # listing twice does not report twice
    manager.plugins()
    assert len(manager.broken) == 1


def test_the_load_variable_naming_an_uninstalled_plugin_warns(
    installed_plugins: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="bridge_core.plugins"):
        manager = create_plugin_manager(environ=only("bridge-echotest", "bridge-echotset"))
    assert manager.missing == ["bridge-echotset"]
    assert "echotest" in manager.providers
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1, warned
    assert "CHATBRIDGE_LOAD_PLUGINS names bridge-echotset, which is not installed" in warned[0]
    assert "bridge-echotest" in warned[0]  # the installed ones are listed


def test_a_broken_plugin_is_described_once_when_a_config_uses_its_provider(
    plugin_site: Path, tmp_path: Path
) -> None:
    config = tmp_path / "bridge.toml"
    config.write_text(
        '[profiles.x]\nprovider = "brokentest"\n[channels.a]\nprofile = "x"\nchannel_id = "c"\n',
        encoding="utf-8",
    )
    env = {**os.environ, "PYTHONPATH": str(plugin_site), LOAD_PLUGINS_VAR: "bridge-brokentest"}
    result = subprocess.run(
        [sys.executable, "-c", "from bridge_core.cli import main; main()", "check", "-c", config],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert result.returncode == 1
    assert result.stderr.count("boom: bridge_brokentest cannot be imported") == 1, result.stderr
    assert "bridge-brokentest is installed but broken (RuntimeError" in result.stderr
