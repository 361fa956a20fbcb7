"""``chatbridge run`` as a real process: HTTP in, console transcript out, signals, restarts."""

from __future__ import annotations

import json
import signal
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from bridge_core.cli import build_cli
from bridge_core.ledger import is_marked
from bridge_core.provider import SendBudget
from bridge_core.testing.budget import assert_paced, read_transcript
from bridge_core.testing.processes import children_of

from .conftest import GatewayProcess, console_config, transcript_lines, wait_for

ECHO = "bridge_core.runtime.agents:echo_agent"


def texts(transcript: Path) -> list[str]:
    return [line["text"] for line in transcript_lines(transcript) if line["op"] == "post"]


def bodies(transcript: Path) -> Counter[str]:
    """How many times each reply body was posted, the recovery marker's line removed."""
    return Counter(t.split("\n", 1)[1] if is_marked(t) else t for t in texts(transcript))


def test_serves_events_messages_and_turns_then_stops_cleanly(
    tmp_path: Path, gateways: list[GatewayProcess]
) -> None:
    transcript = tmp_path / "transcript.jsonl"
    config = console_config(
        tmp_path / "bridge.toml",
        transcript=transcript,
        ledger=str(tmp_path / "bridge.sqlite3"),
        agent=ECHO,
        inbound=True,
    )
    gw = GatewayProcess(config, tmp_path, args=["--settle", "0"], stdin=True)
    gateways.append(gw)
    gw.start()
    events = [{"kind": "AgentSpawned", "agent": f"a{i}", "workspace": "w"} for i in range(3)]
    events.append({"kind": "FutureKind", "agent": "a0"})
    assert gw.post("/v1/events", events).json() == {"accepted": 4, "ignored": 1}
    for i in range(3):
        response = gw.post("/v1/messages", {"channel": "ops", "text": f"note {i}"})
        assert response.status_code == 202
    first = gw.post("/v1/messages", {"channel": "ops", "text": "keyed", "idempotency_key": "k"})
    again = gw.post("/v1/messages", {"channel": "ops", "text": "keyed", "idempotency_key": "k"})
    assert first.json() == {"obligation": again.json()["obligation"], "duplicate": False}
    assert again.json()["duplicate"] is True
    gw.say("hello gateway")
    for i in range(3):
        gw.post("/v1/events", {"kind": "AgentFinished", "agent": f"a{i}", "outcome": "done"})
    wait_for(
        lambda: (
            sum("done" in t for t in texts(transcript) + _edits(transcript)) >= 3
            and "echo: hello gateway" in " ".join(texts(transcript))
        ),
        what="three finished agents and the echo reply",
    )
    health = gw.get("/healthz")
    assert health.status_code == 200 and health.json()["status"] == "ok"
    metrics = gw.get("/metrics").text
    assert 'chatbridge_events_in_total{kind="AgentSpawned"} 3.0' in metrics
    assert 'chatbridge_events_in_total{kind="Unknown"} 1.0' in metrics
    assert 'chatbridge_turns_admitted_total{channel="ops"} 1.0' in metrics
    assert 'chatbridge_turns_answered_total{channel="ops"} 1.0' in metrics
    assert 'chatbridge_group_members{channel="ops"} 1.0' in metrics
    assert gw.stop() == 0
    count = bodies(transcript)
    assert [count[f"note {i}"] for i in range(3)] == [1, 1, 1]
    assert count["keyed"] == 1
    assert sum(1 for t in count if t.startswith("echo: hello gateway")) == 1
    assert_paced(read_transcript(transcript), SendBudget(burst=3, per_second=5.0, edit_spacing=0.5))
    messages = " ".join(str(r.get("msg")) for r in gw.log_records())
    assert "stopped" in messages


def _edits(transcript: Path) -> list[str]:
    return [line["text"] for line in transcript_lines(transcript) if line["op"] == "edit"]


@pytest.mark.parametrize("writer", ["thread", "process"])
def test_sigkill_mid_delivery_then_restart_delivers_every_accepted_message(
    tmp_path: Path, gateways: list[GatewayProcess], writer: str
) -> None:
    # ``process``: the ledger's hot statements in a writer process of their own (ADR 0186),
    # which ends with the killed gateway
    transcript = tmp_path / "transcript.jsonl"
    config = console_config(
        tmp_path / "bridge.toml",
        transcript=transcript,
        ledger=str(tmp_path / "bridge.sqlite3"),
        budget="{ burst = 1, per_second = 20.0, edit_spacing = 0.0 }",
    )
    gw = GatewayProcess(config, tmp_path, args=["--ledger-writer", writer])
    gateways.append(gw)
    accepted: list[str] = []
    for run in range(2):
        gw.start()
        assert gw.process is not None
        assert len(children_of(gw.process.pid)) == (writer == "process")
        before = len(texts(transcript))
        for i in range(20):
            text = f"m-{run}-{i}"
            assert gw.post("/v1/messages", {"channel": "ops", "text": text}).status_code == 202
            accepted.append(text)
        # kill while replies are still queued at the paced sender (pending: each is claimed
        # only when its budget slot is free, ADRs 0025 and 0028)
        wait_for(lambda: len(texts(transcript)) >= before + 4, what="some sends")  # noqa: B023
        gw.kill()
        assert len(bodies(transcript)) < len(accepted), "the kill came too late to test anything"
    gw.start()
    wait_for(
        lambda: set(accepted) <= set(bodies(transcript)), timeout=30, what="every reply delivered"
    )
    assert gw.stop() == 0
    posted = texts(transcript)
    plain = Counter(t for t in posted if not is_marked(t))
    assert max(plain.values()) == 1, "an unmarked copy appeared twice"
    assert set(bodies(transcript)) == set(accepted)
    # A marked copy with no copy before it was labelled though never sent. The replies queued
    # at a kill (waiting for their turn or their token) are unclaimed and go out clean
    # (ADR 0028); only a kill during a claim's own commit can label one that never left.
    seen: set[str] = set()
    labelled_unsent = 0
    for text in posted:
        body = text.split("\n", 1)[1] if is_marked(text) else text
        labelled_unsent += is_marked(text) and body not in seen
        seen.add(body)
    assert labelled_unsent <= 2, f"{labelled_unsent} queued replies were labelled after 2 kills"
    sweeps = [r for r in gw.log_records() if "boot sweep" in str(r.get("msg"))]
    assert len(sweeps) == 3


def test_sigterm_leaves_unfinished_replies_in_the_ledger_for_the_next_start(
    tmp_path: Path, gateways: list[GatewayProcess]
) -> None:
    transcript = tmp_path / "transcript.jsonl"
    config = console_config(
        tmp_path / "bridge.toml",
        transcript=transcript,
        ledger=str(tmp_path / "bridge.sqlite3"),
        budget="{ burst = 1, per_second = 4.0, edit_spacing = 0.0 }",
    )
    gw = GatewayProcess(config, tmp_path, args=["--grace", "0.5"])
    gateways.append(gw)
    gw.start()
    sent = [f"r-{i}" for i in range(12)]
    for text in sent:
        assert gw.post("/v1/messages", {"channel": "ops", "text": text}).status_code == 202
    began = time.monotonic()
    assert gw.stop() == 0
    assert time.monotonic() - began < 5
    assert len(texts(transcript)) < len(sent)
    refused = False
    try:
        gw.post("/v1/messages", {"channel": "ops", "text": "late"})
    except httpx.TransportError:
        refused = True
    assert refused
    gw.start()
    wait_for(lambda: set(sent) <= set(bodies(transcript)), what="the rest delivered")
    assert gw.stop() == 0
    assert "late" not in bodies(transcript)


def test_a_second_signal_exits_at_once(tmp_path: Path, gateways: list[GatewayProcess]) -> None:
    transcript = tmp_path / "transcript.jsonl"
    config = console_config(
        tmp_path / "bridge.toml",
        transcript=transcript,
        ledger=str(tmp_path / "bridge.sqlite3"),
        budget="{ burst = 1, per_second = 0.5, edit_spacing = 0.0 }",
    )
    gw = GatewayProcess(config, tmp_path, args=["--grace", "60"])
    gateways.append(gw)
    gw.start()
    for i in range(5):
        gw.post("/v1/messages", {"channel": "ops", "text": f"slow {i}"})
    gw.signal(signal.SIGINT)  # Ctrl-C first, then a SIGTERM
    wait_for(
        lambda: any("stopping" in str(r.get("msg")) for r in gw.log_records()),
        what="the graceful stop to begin",
    )
    began = time.monotonic()
    gw.signal(signal.SIGTERM)
    assert gw.wait(10) == 128 + signal.SIGTERM
    assert time.monotonic() - began < 5


def test_events_file_is_followed_as_it_grows(
    tmp_path: Path, gateways: list[GatewayProcess]
) -> None:
    transcript = tmp_path / "transcript.jsonl"
    events = tmp_path / "events.jsonl"
    events.write_text(json.dumps({"kind": "AgentSpawned", "agent": "early"}) + "\nnot json\n")
    config = console_config(
        tmp_path / "bridge.toml",
        transcript=transcript,
        ledger=str(tmp_path / "b.sqlite3"),
        token_env="E2E_API_TOKEN",
        extra="max_body_bytes = 2000\n",
    )
    token = "e2e-token-0123456789"
    gw = GatewayProcess(
        config, tmp_path, args=["--events", str(events)], env={"E2E_API_TOKEN": token}
    )
    gateways.append(gw)
    gw.start()
    wait_for(lambda: any("early" in t for t in texts(transcript)), what="the early agent")
    # the API of the real process: a token, whole batches, bounded bodies, never a 500
    event = {"kind": "AgentSpawned", "agent": "api"}
    auth = {"Authorization": f"Bearer {token}"}
    assert gw.post("/v1/events", event).status_code == 401
    assert gw.post("/v1/events", event, headers={"Authorization": "Bearer no"}).status_code == 403
    half = gw.post("/v1/events", [event, {"kind": "StatusChanged", "agent": 3}], headers=auth)
    assert (half.status_code, half.json()["index"], half.json()["field"]) == (400, 1, "agent")
    big = gw.post("/v1/events", [event] * 100, headers=auth)
    assert big.status_code == 413 and "2000 bytes" in big.json()["error"]
    bad = gw.http.post("/v1/events", content=b"{", headers=auth)
    assert bad.status_code == 400 and "malformed JSON" in bad.json()["error"]
    metrics = gw.get("/metrics", headers=auth).text
    assert 'chatbridge_events_in_total{kind="AgentSpawned"} 1.0' in metrics  # "early" only
    assert not any("api" in t for t in texts(transcript))
    with events.open("a") as handle:
        handle.write(json.dumps({"kind": "AgentSpawned", "agent": "late"}) + "\n")
    wait_for(lambda: any("late" in t for t in texts(transcript)), what="the appended agent")
    assert gw.stop() == 0
    skipped = [r for r in gw.log_records() if "line 2: skipped" in str(r.get("msg"))]
    assert len(skipped) == 1


def test_refuses_to_listen_beyond_loopback_without_a_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHATBRIDGE_LOAD_PLUGINS", "")
    config = console_config(
        tmp_path / "bridge.toml",
        transcript=tmp_path / "t.jsonl",
        ledger=str(tmp_path / "b.sqlite3"),
    )
    result = CliRunner().invoke(build_cli(), ["run", "-c", str(config), "--host", "0.0.0.0"])
    assert result.exit_code == 1
    assert "without an API token" in result.output
    assert not (tmp_path / "b.sqlite3").exists()  # refused before touching anything
