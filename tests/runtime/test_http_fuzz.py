"""Hypothesis over the gateway's HTTP API (a real gateway: console provider, SQLite ledger, a
bearer token), with full Unicode in every field and header (ADR 0070): every answer is 2xx or 4xx
with a reason, never a 5xx, and the gateway keeps serving and delivering afterwards."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge_core.config import parse_config
from bridge_core.events import NOTIFYING_KINDS
from bridge_core.plugins import create_plugin_manager
from bridge_core.runtime import Gateway, GatewayOptions
from bridge_core.testing.http_fuzz import (
    ANY_TEXT,
    assert_answered,
    bodies,
    fuzz_settings,
    header_values,
    json_values,
    serve_in_thread,
)

TOKEN = "fuzz-token-0123456789"
MAX_BODY = 64 * 1024
FUZZ = fuzz_settings(120)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[httpx.Client, Path]]:
    folder = tmp_path_factory.mktemp("fuzz")
    transcript = folder / "t.jsonl"
    config = parse_config(
        {
            "profiles": {
                "con": {
                    "provider": "console",
                    "settings": {"transcript": str(transcript), "output": "none"},
                }
            },
            "channels": {"ops": {"profile": "con", "channel_id": "ops", "notify": {"hold": 0}}},
            "stores": {"ledger": str(folder / "bridge.sqlite3")},
            "api": {"token": TOKEN, "max_body_bytes": MAX_BODY},
        },
        path=folder / "bridge.toml",
        providers=create_plugin_manager(load_entry_points=False).providers,
    )
    gateway = Gateway(config, options=GatewayOptions(port=0, settle=0.0, grace=1.0))
    with serve_in_thread(gateway) as running, httpx.Client(base_url=str(running.url)) as client:
        yield client, transcript


AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}

EVENTS = st.fixed_dictionaries(
    {"kind": st.sampled_from(sorted(NOTIFYING_KINDS)) | ANY_TEXT, "agent": ANY_TEXT},
    optional={
        "workspace": ANY_TEXT,
        "title": ANY_TEXT,
        "status": ANY_TEXT,
        "outcome": st.sampled_from(["done", "failed"]) | ANY_TEXT,
        "at": st.floats() | st.integers() | st.integers(10**308, 10**1000) | ANY_TEXT,
        "cost": st.floats() | st.integers(-(10**1000), 10**1000) | ANY_TEXT,
        "turns": st.integers() | ANY_TEXT,
        "extra": json_values(),
    },
)
EVENT_BODIES = st.one_of(EVENTS, st.lists(EVENTS, max_size=5))
MESSAGES = st.fixed_dictionaries(
    {"channel": st.just("ops") | ANY_TEXT, "text": ANY_TEXT},
    optional={"thread": ANY_TEXT, "idempotency_key": ANY_TEXT, "extra": json_values()},
)


def still_serving(client: httpx.Client, transcript: Path) -> None:
    assert client.get("/healthz").status_code == 200
    mark = f"still here {time.monotonic_ns()}"
    answer = client.post("/v1/messages", json={"channel": "ops", "text": mark}, headers=AUTH)
    assert answer.status_code == 202, answer.text
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if transcript.exists() and mark in transcript.read_text("utf-8"):
            return
        time.sleep(0.02)
    raise AssertionError("the gateway stopped delivering")


@FUZZ
@given(body=bodies(EVENT_BODIES, max_body=MAX_BODY))
def test_events_never_get_a_5xx(served: tuple[httpx.Client, Path], body: bytes) -> None:
    client, _ = served
    assert_answered(client.post("/v1/events", content=body, headers=AUTH))


@FUZZ
@given(body=bodies(MESSAGES, max_body=MAX_BODY), key=st.none() | header_values)
def test_messages_never_get_a_5xx(
    served: tuple[httpx.Client, Path], body: bytes, key: bytes | None
) -> None:
    client, _ = served
    headers: dict[str, Any] = dict(AUTH)
    if key is not None:
        headers["Idempotency-Key"] = key
    assert_answered(client.post("/v1/messages", content=body, headers=headers))


@FUZZ
@given(
    path=st.sampled_from(["/v1/events", "/v1/messages", "/metrics", "/healthz", "/nowhere"]),
    authorization=header_values,
    other=header_values,
)
def test_header_bytes_never_get_a_5xx(
    served: tuple[httpx.Client, Path], path: str, authorization: bytes, other: bytes
) -> None:
    client, _ = served
    headers = {"Authorization": authorization, "X-Anything": other}
    event = json.dumps({"kind": "AgentSpawned", "agent": "h"}).encode()
    assert_answered(client.post(path, content=event, headers=headers))


def test_the_gateway_keeps_serving_after_the_fuzzing(served: tuple[httpx.Client, Path]) -> None:
    still_serving(*served)
