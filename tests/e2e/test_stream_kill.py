"""SIGKILL a real gateway while it streams replies (its own agent's, or a connected agent
process's) and start it again, or SIGKILL a connected agent process mid-stream and let another
answer: every turn ends with its full answer delivered once, and no message is left looking
finished when it is not (each stale partial says it was interrupted)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from bridge_core.ledger import is_marked
from bridge_core.streams import CURSOR, INTERRUPTED

from .conftest import GatewayProcess, console_config, transcript_lines, wait_for
from .streaming_agent import full_answer

HERE = Path(__file__).resolve().parent


def last_texts(transcript: Path) -> dict[str, str]:
    """Each message's text as its last successful write left it."""
    shown: dict[str, str] = {}
    for line in transcript_lines(transcript):
        if line["op"] in ("post", "edit"):
            shown[line["message_id"]] = line["text"]
    return shown


def body(text: str) -> str:
    return text.split("\n", 1)[1] if is_marked(text) else text


def finals_by_answer(transcript: Path, answers: dict[str, str]) -> dict[str, int]:
    counts = dict.fromkeys(answers, 0)
    for text in last_texts(transcript).values():
        for question, answer in answers.items():
            if body(text) == answer:
                counts[question] += 1
    return counts


def streaming_edits(transcript: Path, question: str) -> int:
    return sum(
        1
        for line in transcript_lines(transcript)
        if line["op"] == "edit"
        and line["text"].startswith(f"{question}-w")
        and line["text"].endswith(CURSOR)
    )


def test_sigkill_mid_stream_then_restart_answers_every_turn_once(
    tmp_path: Path, gateways: list[GatewayProcess]
) -> None:
    transcript = tmp_path / "transcript.jsonl"
    config = console_config(
        tmp_path / "bridge.toml",
        transcript=transcript,
        ledger=str(tmp_path / "bridge.sqlite3"),
        budget="{ burst = 5, per_second = 20.0, edit_spacing = 0.2 }",
        agent="streaming_agent:answer",
        inbound=True,
    )
    gw = GatewayProcess(
        config,
        tmp_path,
        args=["--settle", "0", "--heartbeat", "0.2"],
        stdin=True,
        env={"PYTHONPATH": str(HERE)},
    )
    gateways.append(gw)
    questions = [f"q{i}" for i in range(3)]
    answers = {q: full_answer(q) for q in questions}
    gw.start()
    for i, question in enumerate(questions):  # one conversation each: they stream at once
        gw.say(json.dumps({"id": f"m{i}", "text": question, "thread": f"t{i}"}))
    wait_for(
        lambda: all(streaming_edits(transcript, q) >= 2 for q in questions),
        what="every reply streaming",
    )
    gw.kill()
    shown = last_texts(transcript)
    assert not any(body(t) in answers.values() for t in shown.values()), "killed too late"
    stale = set(shown)
    gw.start()
    wait_for(
        lambda: (
            all(n == 1 for n in finals_by_answer(transcript, answers).values())
            and all(last_texts(transcript)[m] == INTERRUPTED for m in stale)
        ),
        timeout=40,
        what="every answer delivered and every stale partial marked interrupted",
    )
    assert gw.stop() == 0
    final = last_texts(transcript)
    assert finals_by_answer(transcript, answers) == dict.fromkeys(questions, 1)
    left: dict[str, Any] = defaultdict(list)
    for message_id, text in final.items():
        if text == INTERRUPTED:
            left["interrupted"].append(message_id)
        elif body(text) in answers.values():
            left["final"].append(message_id)
        else:
            left["other"].append((message_id, text[-40:]))
    assert left["other"] == [], "a message was left showing a partial answer"
    assert len(left["final"]) == 3
    assert set(left["interrupted"]) == stale


AGENT_TOKEN = "stream-agent-token"
WORKER = HERE / "stream_agent_worker.py"


def agent_config(path: Path, *, transcript: Path, ledger: Path, port: int = 0) -> Path:
    path.write_text(
        "\n".join(
            [
                "[profiles.con]",
                'provider = "console"',
                f'settings = {{ transcript = "{transcript}", output = "none", inbound = "-", '
                'inbound_channel = "ops", budget = { burst = 5, per_second = 20.0, '
                "edit_spacing = 0.2 } }",
                "[channels.ops]",
                'profile = "con"',
                'channel_id = "ops"',
                'agent_group = "support"',
                "[stores]",
                f'ledger = "{ledger}"',
                "[api]",
                f"port = {port}",
                'agent_tokens = { streamer = { env = "STREAM_AGENT_TOKEN" } }',
                "",
            ]
        )
    )
    return path


def start_agent(gw: GatewayProcess, workdir: Path, name: str) -> subprocess.Popen[bytes]:
    ready = workdir / f"{name}.ready"
    url = gw.url.replace("http://", "ws://") + "/v1/agents"
    with (workdir / f"{name}.err").open("wb") as err:
        process = subprocess.Popen(
            [sys.executable, str(WORKER), url, AGENT_TOKEN, name, str(ready)],
            stdout=subprocess.DEVNULL,
            stderr=err,
            env={**os.environ, "CHATBRIDGE_LOAD_PLUGINS": ""},
        )
    wait_for(ready.exists, timeout=20, what=f"{name} joined (see {workdir / (name + '.err')})")
    return process


def test_sigkill_a_connected_agent_mid_stream_then_another_answers_once(
    tmp_path: Path, gateways: list[GatewayProcess]
) -> None:
    transcript = tmp_path / "transcript.jsonl"
    config = agent_config(
        tmp_path / "bridge.toml", transcript=transcript, ledger=tmp_path / "bridge.sqlite3"
    )
    gw = GatewayProcess(
        config,
        tmp_path,
        args=["--settle", "0", "--heartbeat", "0.2"],
        stdin=True,
        env={"STREAM_AGENT_TOKEN": AGENT_TOKEN},
    )
    gateways.append(gw)
    gw.start()
    first = start_agent(gw, tmp_path, "first")
    try:
        answers = {"q0": full_answer("q0")}
        gw.say(json.dumps({"id": "m0", "text": "q0", "thread": "t0"}))
        wait_for(lambda: streaming_edits(transcript, "q0") >= 2, what="the reply streaming")
        first.send_signal(signal.SIGKILL)
        first.wait()
        stale = set(last_texts(transcript))
        assert not any(body(t) in answers.values() for t in last_texts(transcript).values())
        second = start_agent(gw, tmp_path, "second")
        try:
            wait_for(
                lambda: (
                    finals_by_answer(transcript, answers) == {"q0": 1}
                    and all(last_texts(transcript)[m] == INTERRUPTED for m in stale)
                ),
                timeout=30,
                what="the answer delivered once and the stale partial marked interrupted",
            )
        finally:
            second.kill()
            second.wait()
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert gw.stop() == 0
    final = last_texts(transcript)
    assert finals_by_answer(transcript, answers) == {"q0": 1}
    assert all(text == INTERRUPTED or body(text) in answers.values() for text in final.values())


def test_sigkill_the_gateway_while_a_connected_agent_streams_then_restart(
    tmp_path: Path, gateways: list[GatewayProcess]
) -> None:
    with socket.socket() as probe:  # the restarted gateway listens where the agent reconnects
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    transcript = tmp_path / "transcript.jsonl"
    config = agent_config(
        tmp_path / "bridge.toml",
        transcript=transcript,
        ledger=tmp_path / "bridge.sqlite3",
        port=port,
    )
    gw = GatewayProcess(
        config,
        tmp_path,
        args=["--settle", "0", "--heartbeat", "0.2"],
        stdin=True,
        env={"STREAM_AGENT_TOKEN": AGENT_TOKEN},
    )
    gateways.append(gw)
    gw.start()
    agent = start_agent(gw, tmp_path, "survivor")
    try:
        answers = {"q0": full_answer("q0")}
        gw.say(json.dumps({"id": "m0", "text": "q0", "thread": "t0"}))
        wait_for(lambda: streaming_edits(transcript, "q0") >= 2, what="the reply streaming")
        gw.kill()
        stale = set(last_texts(transcript))
        gw.start()  # the agent reconnects as a new member; the turn has no frame
        wait_for(
            lambda: (
                finals_by_answer(transcript, answers) == {"q0": 1}
                and all(last_texts(transcript)[m] == INTERRUPTED for m in stale)
            ),
            timeout=40,
            what="the answer delivered once and the stale partial marked interrupted",
        )
        assert gw.stop() == 0
    finally:
        agent.kill()
        agent.wait()
    final = last_texts(transcript)
    assert finals_by_answer(transcript, answers) == {"q0": 1}
    assert all(text == INTERRUPTED or body(text) in answers.values() for text in final.values())
