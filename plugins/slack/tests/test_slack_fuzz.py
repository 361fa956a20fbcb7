"""Hypothesis over the Slack Events route of a real gateway (FakeSlack behind it), signed and
unsigned, with full Unicode in every field and any bytes in the headers (ADR 0070): every answer
is 2xx or 4xx, never a 5xx (Slack would retry a 5xx forever), and the gateway keeps answering
people afterwards."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from bridge_slack.testing.fake_slack import FakeSlack, event_callback, message_event, signed_headers
from hypothesis import given
from hypothesis import strategies as st

from bridge_core.config import parse_config
from bridge_core.plugins import create_plugin_manager
from bridge_core.runtime.gateway import Gateway, GatewayOptions
from bridge_core.testing.http_fuzz import (
    ANY_TEXT,
    assert_answered,
    bodies,
    fuzz_settings,
    header_values,
    json_values,
    serve_in_thread,
)

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
CHANNEL = "C0GENERAL"
FUZZ = fuzz_settings(100)
_ts = itertools.count(1_700_000_000)


@pytest.fixture
def served(fake_slack: FakeSlack, tmp_path: Path) -> Iterator[httpx.Client]:
    data = {
        "profiles": {
            "team": {
                "provider": "slack",
                "budget": "unlimited",
                "settings": {
                    "bot_token": fake_slack.token,
                    "signing_secret": SECRET,
                    "api_base_url": fake_slack.api_url,
                    "bot_user_id": fake_slack.bot_user_id,
                },
            }
        },
        "channels": {
            "ops": {
                "profile": "team",
                "channel_id": CHANNEL,
                "agent": "bridge_core.runtime.agents:echo_agent",
            }
        },
        "stores": {"ledger": str(tmp_path / "bridge.sqlite3")},
        "api": {"port": 0, "max_body_bytes": 64 * 1024},
    }
    manager = create_plugin_manager(environ={"CHATBRIDGE_LOAD_PLUGINS": "bridge-slack"})
    config = parse_config(data, path=tmp_path / "bridge.toml", providers=manager.providers)
    gateway = Gateway(config, options=GatewayOptions(port=0, settle=0.0, grace=1.0))
    with serve_in_thread(gateway) as running, httpx.Client(base_url=str(running.url)) as client:
        yield client


EVENTS = st.fixed_dictionaries(
    {
        "type": st.sampled_from(["message", "app_mention"]) | ANY_TEXT,
        "channel": st.just(CHANNEL) | ANY_TEXT,
        "user": st.just("U0PERSON") | ANY_TEXT,
        "text": ANY_TEXT,
        "ts": st.integers(1_600_000_000, 1_800_000_000).map(lambda n: f"{n}.000100") | ANY_TEXT,
    },
    optional={
        "thread_ts": ANY_TEXT,
        "subtype": ANY_TEXT,
        "bot_id": ANY_TEXT,
        "extra": json_values(),
    },
)
PAYLOADS = st.fixed_dictionaries(
    {"type": st.just("event_callback") | ANY_TEXT, "event": EVENTS | json_values()},
    optional={"event_id": ANY_TEXT, "team_id": ANY_TEXT, "challenge": ANY_TEXT},
)


def post(client: httpx.Client, body: bytes, headers: dict[str, Any]) -> httpx.Response:
    return client.post("/slack/events", content=body, headers=headers)


@FUZZ
@given(body=bodies(PAYLOADS, max_body=64 * 1024), retry=st.none() | header_values)
def test_signed_events_never_get_a_5xx(
    served: httpx.Client, body: bytes, retry: bytes | None
) -> None:
    headers: dict[str, Any] = dict(signed_headers(SECRET, body))
    if retry is not None:
        headers["X-Slack-Retry-Num"] = retry
    assert_answered(post(served, body, headers))


@FUZZ
@given(timestamp=header_values, signature=header_values, body=st.binary(max_size=64))
def test_unsigned_or_forged_requests_never_get_a_5xx(
    served: httpx.Client, timestamp: bytes, signature: bytes, body: bytes
) -> None:
    headers = {"X-Slack-Request-Timestamp": timestamp, "X-Slack-Signature": signature}
    answer = post(served, body, headers)
    assert_answered(answer)
    assert answer.status_code in (400, 401)


def test_people_are_still_answered_after_the_fuzzing(
    served: httpx.Client, fake_slack: FakeSlack
) -> None:
    before = fake_slack.count("chat.postMessage")
    mark = f"still here {time.monotonic_ns()}"
    body = event_callback(message_event(channel=CHANNEL, text=mark, ts=f"{next(_ts)}.000200"))
    answer = post(served, body, signed_headers(SECRET, body))
    assert answer.status_code == 200, answer.text
    replies = fake_slack.wait_for(before + 1, "chat.postMessage", timeout=10)
    assert any(mark in json.dumps(r.json) for r in replies)
