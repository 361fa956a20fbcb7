"""The embedded log across a crash: a SIGKILLed gateway's unanswered turns are answered after
the restart, and the platform's replay of the same messages is dropped; and members as tasks of
one process over one SQLite log answer every turn exactly once."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import pytest

from bridge_core.conversation import Frame, Leave, LeaveReason, Turn
from bridge_core.ownership import AgentGroupMember
from bridge_core.ownership.sqlite_log import SqliteConversationLog
from bridge_core.provider import InboundMessage

WORKER = Path(__file__).with_name("group_worker.py")


def start_worker(tmp_path: Path, name: str, answer_delay: list[float], t0_file: Path) -> Any:
    config = {
        "url": str(tmp_path / "bridge.db"),
        "prefix": "unused",
        "channel": "C-sqlite",
        "name": name,
        "seed": 1,
        "settle": 0.2,
        "heartbeat": 0.3,
        "expiry": 1.5,
        "answer_delay": answer_delay,
        "plan": [{"id": f"msg{i}", "author": f"user{i % 7}", "at": i * 0.01} for i in range(20)],
        "t0_file": str(t0_file),
        "out": str(tmp_path / f"{name}.log"),
    }
    with open(tmp_path / f"{name}.err", "w") as errors:
        return subprocess.Popen(
            [sys.executable, str(WORKER), json.dumps(config)],
            stdout=subprocess.DEVNULL,
            stderr=errors,
        )


def wait_for_lines(path: Path, word: str, count: int, timeout: float = 30.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = [line for line in (path.read_text() if path.exists() else "").splitlines()]
        hits = [line for line in lines if line.startswith(word)]
        if len(hits) >= count:
            return hits
        time.sleep(0.05)
    raise AssertionError(f"{path.name}: fewer than {count} {word!r} lines after {timeout} s")


@pytest.mark.timeout(90)
def test_turns_admitted_before_a_sigkill_are_answered_after_the_restart(tmp_path: Path) -> None:
    t0_file = tmp_path / "t0"
    t0_file.write_text(repr(time.monotonic()))
    first = start_worker(tmp_path, "first", [3600.0, 3600.0], t0_file)  # never answers
    try:
        # 7 conversations: the first turn of each is in flight, the others queued behind it
        wait_for_lines(tmp_path / "first.log", "deliver", 7)
        time.sleep(0.3)  # let the rest of the plan be admitted
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    second = start_worker(tmp_path, "second", [0.0, 0.01], t0_file)  # replays the plan
    try:
        answers = wait_for_lines(tmp_path / "second.log", "answer", 20)
    finally:
        second.send_signal(signal.SIGTERM)
        assert second.wait(timeout=20) == 0, (tmp_path / "second.err").read_text()

    async def read() -> list[Any]:
        log = await SqliteConversationLog.open(str(tmp_path / "bridge.db"), channel="C-sqlite")
        records = await log.read(after_seq=0, limit=10_000)
        await log.aclose()
        return records

    records = anyio.run(read)
    turns = [r for r in records if isinstance(r, Turn)]
    frames = [r for r in records if isinstance(r, Frame)]
    assert sorted(t.message_id for t in turns) == sorted(f"msg{i}" for i in range(20))
    assert Counter(f.answers_seq for f in frames) == Counter(t.seq for t in turns)
    assert {f.member.split(":")[0] for f in frames} == {"second"}
    assert len(answers) == 20
    expired = [r for r in records if isinstance(r, Leave) and r.reason is LeaveReason.EXPIRED]
    assert [leave.member.split(":")[0] for leave in expired] == ["first"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_members_as_tasks_over_one_sqlite_log_answer_each_turn_once(
    tmp_path: Path,
) -> None:
    log = await SqliteConversationLog.open(
        str(tmp_path / "bridge.db"), channel="C", poll_interval=0.02
    )
    delivered: list[tuple[str, int]] = []
    members: list[AgentGroupMember] = []

    def handler(index: int) -> Any:
        async def on_turn(turn: Turn, history: Any) -> None:
            member = members[index]
            assert member.current_id is not None
            delivered.append((member.current_id, turn.seq))
            await member.record_frame(turn, f"o{turn.seq}")

        return on_turn

    for index in range(3):
        members.append(
            AgentGroupMember(
                log, member_id=f"m{index}", on_turn=handler(index), settle=0.1, heartbeat=0.2
            )
        )
    async with anyio.create_task_group() as tg:
        for member in members:
            tg.start_soon(member.run)
        for member in members:
            await member.ready.wait()
        await anyio.sleep(0.15)
        turns = []
        for i in range(150):
            turn = await log.admit(
                InboundMessage(message_id=f"x{i}", channel="C", author=f"u{i % 30}", text="t", at=0)
            )
            assert turn is not None
            turns.append(turn)
        with anyio.fail_after(20):
            while (await log.statistics()).turns_answered < len(turns):  # noqa: ASYNC110
                await anyio.sleep(0.05)
        for member in members:
            member.stop()
    counts = Counter(seq for _member, seq in delivered)
    assert all(counts[t.seq] == 1 for t in turns)
    assert len({m for m, _seq in delivered}) == 3
    stats = await log.statistics()
    assert (stats.members, stats.turns_admitted, stats.turns_answered) == (0, 150, 150)
    await log.aclose()
