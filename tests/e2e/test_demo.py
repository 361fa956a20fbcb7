"""``chatbridge demo`` as a user runs it: a real process, checked through its transcript.

Each run plays a script on the clock (12 s and 10 s) and sleeps through most of it, so the module
starts both processes at once (``demos``) and each test reads its own: the same two commands,
ten seconds sooner."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from bridge_slack import SLACK_BUDGET

from bridge_core.ledger import is_marked
from bridge_core.testing.budget import assert_paced, read_transcript

CHATBRIDGE = [sys.executable, "-c", "from bridge_core.cli import main; main()"]


class Demo:
    """One ``chatbridge demo`` process, started with the others, and its data folder."""

    def __init__(self, data_dir: Path, *options: str) -> None:
        self.data_dir = data_dir
        self.process = subprocess.Popen(
            [*CHATBRIDGE, "demo", *options, "--data-dir", str(data_dir)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "CHATBRIDGE_LOAD_PLUGINS": ""},
        )
        self.done: subprocess.CompletedProcess[str] | None = None

    def wait(self) -> subprocess.CompletedProcess[str]:
        if self.done is None:
            # The demo writes a few kilobytes: communicate() drains both pipes meanwhile.
            stdout, stderr = self.process.communicate(timeout=60)
            self.done = subprocess.CompletedProcess(
                self.process.args, self.process.returncode, stdout, stderr
            )
        return self.done


@pytest.fixture(scope="module")
def demos(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Demo]]:
    started = {
        "plain": Demo(tmp_path_factory.mktemp("demo"), "--seconds", "12", "--scripted"),
        "agent-process": Demo(
            tmp_path_factory.mktemp("demo-agent"),
            "--seconds", "10", "--scripted", "--agent-process",
        ),
    }  # fmt: skip
    try:
        yield started
    finally:
        for demo in started.values():
            if demo.process.poll() is None:
                demo.process.kill()
                demo.process.communicate()


def test_demo_shows_the_channel_and_stops_by_itself(demos: dict[str, Demo]) -> None:
    data_dir = demos["plain"].data_dir
    done = demos["plain"].wait()
    assert done.returncode == 0, done.stderr
    assert "demo finished after" in done.stdout
    assert "ledger rows: delivered 2" in done.stdout

    entries = read_transcript(data_dir / "transcript.jsonl")
    assert_paced(entries, SLACK_BUDGET)  # the demo's channel runs on Slack's budget
    by_message: dict[str, list[str]] = {}
    for entry in entries:
        if entry.op in ("post", "edit") and entry.message_id is not None:
            by_message.setdefault(entry.message_id, []).append(entry.text)

    def message(needle: str) -> list[str]:
        found = [texts for texts in by_message.values() if needle in texts[0]]
        assert len(found) == 1, f"expected one message starting with {needle!r}: {by_message}"
        return found[0]

    # the burst of six shares one summary, edited in place to its final counts
    summary = message("6 agents in [web]")
    assert len(summary) >= 2
    assert "5 done" in summary[-1] and "1 killed" in summary[-1]
    assert not any("build-1 [web]" in texts[0] for texts in by_message.values())
    # the chatty agent: one live message, edited (never reposted), ending done
    chatty = message("chatty [api]")
    assert 2 <= len(chatty) <= 6
    assert "done: cost $0.87, 23 turns" in chatty[-1]
    # the crash gets its own post; the rate limit was met once and waited out
    assert "crashed" in message("migrator [api]")[-1]
    errors = [e for e in entries if e.op == "error"]
    assert [e.error for e in errors] == ["RateLimited"]
    # both scripted user messages were answered once, unmarked
    replies = [texts for texts in by_message.values() if texts[0].startswith("echo:")]
    assert sorted(r[0].split(" (")[0] for r in replies) == [
        "echo: hi! is the build green yet?",
        "echo: thanks - what is the migrator doing?",
    ]
    assert not any(is_marked(r[0]) for r in replies)


def test_demo_with_an_agent_process_answers_from_that_process(demos: dict[str, Demo]) -> None:
    data_dir = demos["agent-process"].data_dir
    done = demos["agent-process"].wait()
    assert done.returncode == 0, done.stderr
    joined = [line for line in done.stdout.splitlines() if "joined demo as" in line]
    assert len(joined) == 1, done.stdout
    pid = joined[0].split("agent process ")[1].split()[0]
    assert pid.isdigit() and "ledger rows: delivered 2" in done.stdout
    replies = [
        e.text for e in read_transcript(data_dir / "transcript.jsonl") if e.op == "post" and e.text
    ]
    answered = [text for text in replies if text.startswith("echo:")]
    assert len(answered) == 2, replies
    assert all(f"(from agent process {pid})" in text for text in answered)
