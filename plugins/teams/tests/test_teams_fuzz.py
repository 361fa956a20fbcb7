"""Hypothesis over the Teams messaging endpoint of a real gateway (FakeTeams behind it), with
valid and fuzzed tokens and full Unicode in every field of the activity (ADR 0070): every answer
is 2xx or 4xx, never a 5xx (the connector would resend it), and the gateway keeps answering
people afterwards."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from bridge_teams.testing.fake_teams import FakeTeams
from cryptography.hazmat.primitives.asymmetric import rsa
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

CHANNEL = "19:fuzz0000@thread.tacv2"
PATH = "/api/teams/messages"
FUZZ = fuzz_settings(80)


@pytest.fixture
def fake(signing_key: rsa.RSAPrivateKey) -> Iterator[FakeTeams]:
    with FakeTeams(signing_key=signing_key) as server:
        server.add_conversation(CHANNEL)
        yield server


@pytest.fixture
def served(fake: FakeTeams, tmp_path: Path) -> Iterator[httpx.Client]:
    data = {
        "profiles": {
            "bot": {
                "provider": "teams",
                "budget": "unlimited",
                "settings": {
                    "app_id": fake.app_id,
                    "app_password": fake.app_password,
                    "service_url": fake.service_url,
                    "token_url": fake.token_url,
                    "openid_metadata_url": fake.openid_url,
                    "call_deadline": 2.0,
                },
            }
        },
        "channels": {
            "ops": {
                "profile": "bot",
                "channel_id": CHANNEL,
                "agent": "bridge_core.runtime.agents:echo_agent",
            }
        },
        "stores": {"ledger": str(tmp_path / "bridge.sqlite3")},
        "api": {"port": 0, "max_body_bytes": 64 * 1024},
    }
    manager = create_plugin_manager(environ={"CHATBRIDGE_LOAD_PLUGINS": "bridge-teams"})
    config = parse_config(data, path=tmp_path / "bridge.toml", providers=manager.providers)
    gateway = Gateway(config, options=GatewayOptions(port=0, settle=0.0, grace=1.0))
    with serve_in_thread(gateway) as running, httpx.Client(base_url=str(running.url)) as client:
        yield client


def activities(fake: FakeTeams) -> st.SearchStrategy[dict[str, Any]]:
    """Activities as the connector sends them, with fuzzed text, ids, authors and conversation."""

    def build(text: str, conversation: str, author: str, aad: str, ident: str) -> dict[str, Any]:
        activity = fake.message_activity(CHANNEL, text, author_id=author, author_aad=aad)
        activity["conversation"]["id"] = conversation
        activity["id"] = ident
        return activity

    return st.builds(
        build,
        ANY_TEXT,
        st.just(CHANNEL) | ANY_TEXT,
        st.just("29:user-1") | ANY_TEXT,
        st.just("aad-1") | ANY_TEXT,
        st.uuids().map(str) | ANY_TEXT,
    ) | st.builds(
        lambda base, extra: {**base, **extra},
        st.builds(build, *[ANY_TEXT] * 5),
        st.dictionaries(ANY_TEXT, json_values(), max_size=3),
    )


@FUZZ
@given(data=st.data())
def test_signed_activities_never_get_a_5xx(
    served: httpx.Client, fake: FakeTeams, data: st.DataObject
) -> None:
    body = data.draw(bodies(activities(fake), max_body=64 * 1024))
    headers = {"Authorization": f"Bearer {fake.channel_token()}"}
    assert_answered(served.post(PATH, content=body, headers=headers))


@FUZZ
@given(authorization=header_values)
def test_fuzzed_tokens_never_get_a_5xx(
    served: httpx.Client, fake: FakeTeams, authorization: bytes
) -> None:
    body = json.dumps(fake.message_activity(CHANNEL, "let me in")).encode()
    answer = served.post(PATH, content=body, headers={"Authorization": authorization})
    assert_answered(answer)
    assert answer.status_code in (400, 401)


def test_people_are_still_answered_after_the_fuzzing(served: httpx.Client, fake: FakeTeams) -> None:
    before = fake.count()
    mark = f"still here {time.monotonic_ns()}"
    body = json.dumps(fake.message_activity(CHANNEL, mark)).encode()
    answer = served.post(
        PATH, content=body, headers={"Authorization": f"Bearer {fake.channel_token()}"}
    )
    assert answer.status_code == 200, answer.text
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if any(mark.encode() in r.body for r in fake.requests[before:]):
            return
        time.sleep(0.05)
    raise AssertionError("the gateway stopped answering")
