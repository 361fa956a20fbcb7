"""``chatbridge check`` refuses what ``run`` would refuse at start, and ``--connect`` asks the
stores and each channel's platform."""

from __future__ import annotations

import json
import socket
from pathlib import Path

from click.testing import CliRunner

from bridge_core.cli import build_cli
from bridge_core.plugins import LOAD_PLUGINS_VAR
from bridge_core.testing.services import require_redis


def _config(tmp_path: Path, *, agent: str | None = None, stores: str = "", api: str = "") -> Path:
    lines = [
        "[profiles.term]",
        'provider = "console"',
        f'settings = {{ transcript = "{tmp_path / "t.jsonl"}", output = "none" }}',
        "[channels.ops]",
        'profile = "term"',
        'channel_id = "ops"',
    ]
    if agent:
        lines.append(f'agent = "{agent}"')
    lines += ["[stores]", f'ledger = "{tmp_path / "b.sqlite3"}"', stores, "[api]", api]
    path = tmp_path / "bridge.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _check(*args: str) -> tuple[int, str]:
    result = CliRunner(env={LOAD_PLUGINS_VAR: ""}).invoke(build_cli(), ["check", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    # rich wraps at the terminal's width: compare the words, not the line breaks.
    output = result.output if "--json" in args else " ".join(result.output.split())
    return result.exit_code, output


def _refused_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_an_agent_that_cannot_be_imported_fails_check_as_it_would_fail_run(
    tmp_path: Path,
) -> None:
    code, output = _check("-c", str(_config(tmp_path, agent="no_such_pkg.agents:answer")))
    assert code == 1
    assert "`chatbridge run` would refuse to start" in output
    assert "channels.ops.agent: agent 'no_such_pkg.agents:answer': cannot import" in output


def test_listening_beyond_loopback_without_a_token_fails_check(tmp_path: Path) -> None:
    code, output = _check("-c", str(_config(tmp_path, api='host = "0.0.0.0"')))
    assert code == 1
    assert "api.host: refusing to listen on '0.0.0.0' without an API token" in output


def test_a_good_agent_passes(tmp_path: Path) -> None:
    config = _config(tmp_path, agent="bridge_core.runtime.agents:echo_agent")
    code, output = _check("-c", str(config), "--json")
    assert code == 0, output
    assert json.loads(output)["problems"] == []


def test_connect_reports_an_unreachable_redis_and_fails(tmp_path: Path) -> None:
    url = f"redis://:hunter22@127.0.0.1:{_refused_port()}/0"
    config = _config(tmp_path, stores=f'membership = "{url}"')
    code, output = _check("-c", str(config), "--connect", "--json")
    assert code == 1, output
    found = {probe["what"]: probe for probe in json.loads(output)["connect"]}
    assert found["membership"]["ok"] is False
    assert "connecting to 127.0.0.1" in found["membership"]["detail"]
    assert found["ledger"]["ok"] is True  # the SQLite file's folder is writable
    assert found["channel ops"]["ok"] is True
    # What the probes say never quotes the password (the resolved view's masking is check's own).
    assert "hunter22" not in json.dumps(json.loads(output)["connect"])
    assert not (tmp_path / "b.sqlite3").exists()  # checking creates nothing


def test_connect_passes_with_a_live_redis_and_says_what_it_tried(tmp_path: Path) -> None:
    config = _config(tmp_path, stores=f'membership = "{require_redis()}"')
    code, output = _check("-c", str(config), "--connect")
    assert code == 0, output
    assert "✓ membership: Redis at redis://" in output
    assert "✓ ledger: SQLite file" in output and "will be created" in output
    assert "✓ channel ops: console channel 'ops' (profile term): the bot can post" in output


def test_connect_names_a_missing_ledger_folder(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such" / "ledger.sqlite3"
    config = _config(tmp_path)
    config.write_text(
        config.read_text().replace(str(tmp_path / "b.sqlite3"), str(missing)), encoding="utf-8"
    )
    code, output = _check("-c", str(config), "--connect")
    assert code == 1
    assert f"✗ ledger: folder {missing.parent} does not exist" in output
