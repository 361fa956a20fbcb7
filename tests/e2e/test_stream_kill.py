"""SIGKILL a real gateway while it streams replies, then start it again: every turn ends with
its full answer delivered once, and no message is left looking finished when it is not (each
stale partial says it was interrupted)."""

from __future__ import annotations

import json
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
