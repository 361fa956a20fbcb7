"""The Slack plugin inside the real gateway: a config selecting it, fleet events posted to
FakeSlack, and signed Slack events on the gateway's own HTTP server becoming turns an agent
answers in the channel."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from bridge_slack.testing.fake_slack import FakeSlack, event_callback, message_event, signed_headers

from bridge_core.config import parse_config
from bridge_core.plugins import create_plugin_manager
from bridge_core.runtime.gateway import Gateway, GatewayOptions

pytestmark = pytest.mark.anyio

ECHO = "bridge_core.runtime.agents:echo_agent"


def config_for(fake: FakeSlack, tmp_path: Path, signing_secret: str) -> Any:
    data = {
        "profiles": {
            "team": {
                "provider": "slack",
                "budget": {"preset": "slack", "per_second": 20.0, "edit_spacing": 0.1},
                "settings": {
                    "bot_token": {"env": "SLACK_BOT_TOKEN"},
                    "signing_secret": {"env": "SLACK_SIGNING_SECRET"},
                    "api_base_url": fake.api_url,
                    "bot_user_id": fake.bot_user_id,
                },
            }
        },
        "channels": {
            "ops": {
                "profile": "team",
                "channel_id": "C0GENERAL",
                "agent": ECHO,
                "notify": {"hold": 0.1},
            }
        },
        "stores": {"ledger": str(tmp_path / "bridge.sqlite3")},
        "api": {"port": 0},
    }
    environ = {"SLACK_BOT_TOKEN": fake.token, "SLACK_SIGNING_SECRET": signing_secret}
    manager = create_plugin_manager(environ={"CHATBRIDGE_LOAD_PLUGINS": "bridge-slack"})
    return parse_config(data, providers=manager.providers, environ=environ)


async def test_the_gateway_posts_to_slack_and_answers_signed_events(
    fake_slack: FakeSlack, tmp_path: Path, signing_secret: str
) -> None:
    config = config_for(fake_slack, tmp_path, signing_secret)
    options = GatewayOptions(host="127.0.0.1", port=0, settle=0.0, grace=2.0)
    async with Gateway(config, options=options) as gateway, httpx.AsyncClient() as http:
        assert gateway.url is not None
        spawned = {"kind": "AgentSpawned", "agent": "a1", "workspace": "w", "title": "tests"}
        answer = await http.post(f"{gateway.url}/v1/events", json=[spawned])
        assert answer.status_code in (200, 202)
        (post,) = await fake_slack.wait_for_async(1, "chat.postMessage", within=10)
        assert "a1" in post.json["text"] and post.json["channel"] == "C0GENERAL"

        body = event_callback(message_event(channel="C0GENERAL", text="hello bridge"))
        event_url = f"{gateway.url}/slack/events"
        first = await http.post(
            event_url, content=body, headers=signed_headers(signing_secret, body)
        )
        assert first.status_code == 200
        replies = await fake_slack.wait_for_async(2, "chat.postMessage", within=10)
        assert "echo: hello bridge" in replies[-1].json["text"]

        retry = await http.post(
            event_url, content=body, headers=signed_headers(signing_secret, body, retry_num=1)
        )
        assert retry.status_code == 200
        forged = await http.post(event_url, content=body, headers=signed_headers("nope", body))
        assert forged.status_code == 401
        metrics = (await http.get(f"{gateway.url}/metrics")).text
    admitted = [line for line in metrics.splitlines() if "turns_admitted_total{" in line]
    assert admitted == ['chatbridge_turns_admitted_total{channel="ops"} 1.0'], admitted
    posts = fake_slack.requests_to("chat.postMessage")
    assert all(r.header("Authorization") == f"Bearer {fake_slack.token}" for r in posts)
    assert json.dumps(config.model_dump(mode="json")).count(fake_slack.token) == 0
