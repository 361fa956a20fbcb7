"""The first hour, scripted: what a new operator and a new provider author run, in the order
they run it, in a fresh virtual environment (the one the template's README commands made:
bridge-core from this checkout and a generated provider, its tests passed), each command as a
user types it: ``init``, ``check --connect``, ``install`` of a local plugin, ``providers``,
``simulate -p`` with that plugin's budget, ``plugins``, ``uninstall``, ``demo``.

A step that needs anything the docs do not say fails here."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from cookiecutter.main import cookiecutter

from .conftest import TEMPLATE, ReadmeProject, clean_environment


def _chatbridge(
    project: ReadmeProject, *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(project.bin / "chatbridge"), *args],
        cwd=cwd,
        env={**clean_environment(), **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert "Traceback" not in done.stdout + done.stderr, done.stdout + done.stderr
    return done


def _ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, (
        f"{done.args} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    )
    return done.stdout


def test_the_first_hour(readme_project: ReadmeProject, tmp_path: Path) -> None:
    work = tmp_path / "ops"

    # An operator starts a config for the terminal and the provider they installed.
    out = _ok(
        _chatbridge(
            readme_project,
            "init",
            "-d",
            str(work),
            "-p",
            "console",
            "-p",
            "acme-chat",
            cwd=tmp_path,
        )
    )
    assert "wrote" in out and (work / "bridge.toml").is_file()
    dotenv = (work / ".env.example").read_text(encoding="utf-8")
    assert "ACME_CHAT_TOKEN=" in dotenv
    # As .env.example says: without the variable, check names it; with it, the file is valid.
    missing = _chatbridge(readme_project, "check", cwd=work)
    assert missing.returncode == 1
    assert "environment variable ACME_CHAT_TOKEN is not set (export it)" in missing.stderr
    _ok(_chatbridge(readme_project, "check", cwd=work, env={"ACME_CHAT_TOKEN": "t0ken-value"}))

    # --connect on the terminal's part: the ledger's folder, and the console channel's probe.
    console_only = tmp_path / "console"
    _ok(_chatbridge(readme_project, "init", "-d", str(console_only), cwd=tmp_path))
    connected = _ok(_chatbridge(readme_project, "check", "--connect", cwd=console_only))
    words = " ".join(connected.split())
    assert "✓ ledger: SQLite file" in words
    assert (
        "✓ channel console: console channel 'console' (profile console-bot): the bot can post"
        in (words)
    )

    # A provider author installs a second, local plugin with chatbridge itself.
    local = Path(
        cookiecutter(
            str(TEMPLATE),
            no_input=True,
            output_dir=str(tmp_path / "src"),
            extra_context={"provider_name": "Zulu Talk"},
        )
    )
    _ok(_chatbridge(readme_project, "install", str(local), cwd=tmp_path))
    listed = json.loads(_ok(_chatbridge(readme_project, "providers", "--json", cwd=tmp_path)))
    names = {entry["name"]: entry for entry in listed["providers"]}
    assert names["zulu-talk"]["distribution"] == "bridge-zulu-talk"
    assert {"console", "acme-chat", "zulu-talk"} <= set(names)

    # Its declared budget drives a simulation.
    events = tmp_path / "events.jsonl"
    events.write_text(
        "".join(
            json.dumps({"t": i * 0.1, "kind": "AgentSpawned", "agent": f"a{i}", "workspace": "w"})
            + "\n"
            for i in range(10)
        ),
        encoding="utf-8",
    )
    simulated = json.loads(
        _ok(
            _chatbridge(
                readme_project, "simulate", str(events), "-p", "zulu-talk", "--json", cwd=tmp_path
            )
        )
    )
    assert simulated["profile_from"] == "its plugin"
    assert simulated["budget"] == names["zulu-talk"]["budget"]

    plugins = json.loads(_ok(_chatbridge(readme_project, "plugins", cwd=tmp_path)))
    assert {p["distribution"]: p["status"] for p in plugins["plugins"]} == {
        "bridge-acme-chat": "ok",
        "bridge-zulu-talk": "ok",
    }

    _ok(_chatbridge(readme_project, "uninstall", "-y", "bridge-zulu-talk", cwd=tmp_path))
    listed = json.loads(_ok(_chatbridge(readme_project, "providers", "--json", cwd=tmp_path)))
    assert "zulu-talk" not in {entry["name"] for entry in listed["providers"]}

    # And the README's first command: the demo, here short and without standard input.
    demo = _ok(
        _chatbridge(
            readme_project,
            "demo",
            "--seconds",
            "1",
            "--scripted",
            "--data-dir",
            str(tmp_path / "demo"),
            cwd=tmp_path,
        )
    )
    assert demo.strip(), "the demo printed nothing"
