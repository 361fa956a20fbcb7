"""``GET /v1/status`` and ``chatbridge top`` against a running gateway process."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from .conftest import CHATBRIDGE, GatewayProcess, console_config, wait_for

ECHO = "bridge_core.runtime.agents:echo_agent"


def test_status_and_top_show_channels_budget_use_live_messages_members_and_the_ledger(
    tmp_path: Path, gateways: list[GatewayProcess]
) -> None:
    token = "top-secret-token"
    config = console_config(
        tmp_path / "bridge.toml",
        transcript=tmp_path / "t.jsonl",
        ledger=str(tmp_path / "b.sqlite3"),
        budget="{ burst = 3, per_hour = 100, edit_spacing = 0.2 }",
        agent=ECHO,
        token_env="TOP_TEST_TOKEN",
    )
    gw = GatewayProcess(config, tmp_path, args=["--settle", "0"], env={"TOP_TEST_TOKEN": token})
    gateways.append(gw)
    gw.start()
    auth = {"Authorization": f"Bearer {token}"}
    assert gw.get("/v1/status").status_code == 401  # behind the token, like the rest of /v1
    gw.post("/v1/events", {"kind": "AgentSpawned", "agent": "builder", "workspace": "w1"},
            headers=auth)  # fmt: skip
    gw.post("/v1/events", {"kind": "StatusChanged", "agent": "builder", "status": "testing"},
            headers=auth)  # fmt: skip
    assert (
        gw.post("/v1/messages", {"channel": "ops", "text": "hi"}, headers=auth).status_code == 202
    )

    def sent_twice() -> dict[str, object] | None:
        status = gw.get("/v1/status", headers=auth).json()
        ops = status["channels"]["ops"]
        return status if ops["sends"]["hour"] >= 2 and ops["live"] else None

    status = wait_for(sent_twice, what="the live message and the reply sent")
    ops = status["channels"]["ops"]
    assert ops["healthy"] is True and ops["provider"] == "console"
    assert ops["budget"]["burst"] == 3
    assert ops["budget"]["windows"] == [{"limit": 100, "seconds": 3600.0}]
    assert ops["live"][0]["agent"] == "builder" and ops["live"][0]["status"] == "testing"
    assert ops["members"] == 1 and ops["agent_here"] is True
    assert status["ledger"]["delivered"] >= 1

    top = subprocess.run(
        [*CHATBRIDGE, "top", "--once", "--url", gw.url],
        env={**os.environ, "BRIDGE_API_TOKEN": token, "COLUMNS": "120"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert top.returncode == 0, top.stderr
    screen = top.stdout
    for shown in ("chatbridge top", "ops", "console:ops", "ok", "builder", "testing", "delivered"):
        assert shown in screen, f"{shown!r} not on the dashboard:\n{screen}"
    assert "/100 per hour" in screen and "/3 burst" in screen
    assert token not in screen

    refused = subprocess.run(
        [*CHATBRIDGE, "top", "--once", "--url", gw.url, "--token", "wrong"],
        env={k: v for k, v in os.environ.items() if k != "BRIDGE_API_TOKEN"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert refused.returncode == 1
    assert "the gateway refused the token (403)" in refused.stderr
