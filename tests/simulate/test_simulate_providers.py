"""``chatbridge simulate -p NAME`` for any installed provider, and Ctrl-C during a simulation."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from bridge_core.cli import build_cli
from bridge_core.plugins import LOAD_PLUGINS_VAR
from bridge_core.testing.plugin_site import write_plugin

# A provider no preset knows, declared by a distribution installed (as a dist-info folder on
# sys.path) for the test: its own budget and capabilities must drive the simulation.
_PLUGIN = """
from bridge_core import Capabilities, LengthUnit, SendBudget
from bridge_core.hookspecs import ProviderType, hookimpl
from pydantic import BaseModel


class Settings(BaseModel):
    pass


def _factory(settings, context):
    raise AssertionError("simulate never builds a provider")


@hookimpl
def register_providers(register):
    register(
        ProviderType(
            name="zulipish",
            capabilities=Capabilities(edit=False, max_length=900, length_unit=LengthUnit.BYTES),
            budget=SendBudget.hourly(burst=2, per_hour=600),
            settings_model=Settings,
            factory=_factory,
        )
    )
"""


def install_zulipish(site: Path) -> Path:
    return write_plugin(
        site, distribution="bridge-zulipish", version="0.3.0", provider="zulipish", source=_PLUGIN
    )


def burst(count: int) -> str:
    lines: list[dict[str, Any]] = []
    for i in range(count):
        lines.append({"t": i * 0.01, "kind": "AgentSpawned", "agent": f"a{i}", "workspace": "w"})
    for i in range(count):
        lines.append(
            {
                "t": count * 0.01 + 60 + i * 0.01,
                "kind": "AgentFinished",
                "agent": f"a{i}",
                "outcome": "done",
            }
        )
    return "".join(json.dumps(line) + "\n" for line in lines)


def test_an_installed_providers_budget_and_capabilities_are_simulated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(install_zulipish(tmp_path / "site")))
    events = tmp_path / "events.jsonl"
    events.write_text(burst(20), encoding="utf-8")
    runner = CliRunner(env={LOAD_PLUGINS_VAR: "bridge-zulipish"})
    result = runner.invoke(
        build_cli(), ["simulate", str(events), "-p", "zulipish", "--json"], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["provider"] == "zulipish"
    assert summary["profile_from"] == "its plugin"
    assert summary["budget"]["burst"] == 2 and summary["budget"]["windows"] == [
        {"limit": 600, "seconds": 3600.0}
    ]
    assert summary["capabilities"]["edit"] is False
    assert summary["capabilities"]["length_unit"] == "bytes"
    assert summary["largest_burst"] <= 2
    assert summary["violations"] == []


def test_an_unknown_provider_is_a_usage_error_naming_what_exists(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    events.write_text(burst(1), encoding="utf-8")
    runner = CliRunner(env={LOAD_PLUGINS_VAR: ""})
    result = runner.invoke(build_cli(), ["simulate", str(events), "-p", "zulipish"])
    assert result.exit_code == 2, result.output
    assert "no provider named 'zulipish' is installed (installed providers: console)" in (
        result.output
    )
    assert "Built-in presets, usable without their plugin: console, discord, slack, teams" in (
        result.output
    )
    assert "Traceback" not in result.output


def test_ctrl_c_during_a_simulation_is_one_line_and_status_130(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    events.write_text(burst(30_000), encoding="utf-8")
    transcript = tmp_path / "transcript.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    args = [str(events), "-p", "slack", "--transcript", str(transcript)]
    process = subprocess.Popen(
        [sys.executable, "-c", "from bridge_core.cli import main; main()", "simulate", *args],
        env={**env, LOAD_PLUGINS_VAR: ""},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # The transcript's first line means the simulation itself is running (not the import).
        deadline = time.monotonic() + 60
        while not (transcript.exists() and transcript.stat().st_size > 0):
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the simulation never started"
            time.sleep(0.02)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 130, (out, err)
    assert err.strip() == "simulate interrupted; nothing was summarised", err
