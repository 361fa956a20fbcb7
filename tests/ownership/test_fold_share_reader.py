"""One member of a fold share reads the log for all of them (ADR 0178): when it stops another
takes over from the share's cursor, and a member that does not read still sees its own leave."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from bridge_core.conversation import Frame, Turn
from bridge_core.ownership import AgentGroupMember
from bridge_core.ownership.fold_share import FoldShare, SharedMemberView
from bridge_core.ownership.sqlite_log import SqliteConversationLog
from bridge_core.provider import InboundMessage

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def message(i: int, prefix: str) -> InboundMessage:
    return InboundMessage(
        message_id=f"{prefix}{i}", channel="C", author=f"u{i % 7}", text="t", at=0
    )


class Members:
    def __init__(self, log: SqliteConversationLog) -> None:
        self.log = log
        self.members: dict[str, AgentGroupMember] = {}
        self.delivered: list[tuple[str, int]] = []

    def add(self, name: str, *, heartbeat: float = 0.2) -> AgentGroupMember:
        async def on_turn(turn: Turn, history: Any) -> None:
            member = self.members[name]
            assert member.current_id is not None
            self.delivered.append((member.current_id, turn.seq))
            await member.record_frame(turn, f"o{turn.seq}")

        member = AgentGroupMember(
            self.log, member_id=name, on_turn=on_turn, settle=0.0, heartbeat=heartbeat
        )
        self.members[name] = member
        return member

    def share(self) -> FoldShare:
        view = next(iter(self.members.values())).view
        assert isinstance(view, SharedMemberView)
        return view._share

    async def until_answered(self, count: int) -> None:
        with anyio.fail_after(20):
            while (await self.log.statistics()).turns_answered < count:  # noqa: ASYNC110
                await anyio.sleep(0.01)  # the count is in the file: nothing to wait on


async def eventually(check: Callable[[], bool]) -> None:
    """Until ``check()`` holds (the caller bounds the wait): what it reads is other tasks'
    state, with no event to wait on."""
    while not check():  # noqa: ASYNC110
        await anyio.sleep(0.01)


async def frames_per_turn(log: SqliteConversationLog) -> Counter[int]:
    records = await log.read(after_seq=0, limit=100_000)
    return Counter(r.answers_seq for r in records if isinstance(r, Frame))


async def test_when_the_reading_member_stops_another_reads_on(
    tmp_path: Path, anyio_backend: str
) -> None:
    log = await SqliteConversationLog.open(str(tmp_path / "b.db"), channel="C", poll_interval=0.02)
    group = Members(log)
    turns: list[Turn | None] = []
    async with anyio.create_task_group() as tg:
        for name in ("a", "b", "c"):
            tg.start_soon(group.add(name).run)
        for member in group.members.values():
            await member.ready.wait()
        turns += [await log.admit(message(i, "x")) for i in range(20)]
        await group.until_answered(20)
        share = group.share()
        reader = next(m for m in group.members.values() if m.current_id == share._reader)
        reader.stop()
        with anyio.fail_after(10):
            await eventually(lambda: share._reader not in (None, reader.current_id))
        assert share._reader in {m.current_id for m in group.members.values()}
        turns += [await log.admit(message(i, "y")) for i in range(20)]
        await group.until_answered(40)
        for member in group.members.values():
            member.stop()
    frames = await frames_per_turn(log)
    assert all(turn is not None and frames[turn.seq] == 1 for turn in turns)
    handed = Counter(seq for _member, seq in group.delivered)
    assert all(turn is not None and handed[turn.seq] == 1 for turn in turns)
    await log.aclose()


async def test_a_member_that_does_not_read_sees_its_own_leave_and_joins_again(
    tmp_path: Path, anyio_backend: str
) -> None:
    log = await SqliteConversationLog.open(str(tmp_path / "b.db"), channel="C", poll_interval=0.02)
    group = Members(log)
    async with anyio.create_task_group() as tg:
        for name in ("a", "b"):
            # no heartbeat within the test: the leave can only be seen through the fold
            tg.start_soon(group.add(name, heartbeat=60.0).run)
        for member in group.members.values():
            await member.ready.wait()
        share = group.share()
        with anyio.fail_after(10):
            await eventually(lambda: share._reader is not None)
        other = next(m for m in group.members.values() if m.current_id != share._reader)
        first_id = other.current_id
        assert first_id is not None
        assert await log.leave(first_id) is not None  # as the reaper would, or an operator
        with anyio.fail_after(5):  # the heartbeat would take a minute to tell
            await eventually(lambda: other.statistics().rejoins == 1)
        with anyio.fail_after(10):
            await eventually(lambda: other.delivering and other.current_id != first_id)
        turns = [await log.admit(message(i, "z")) for i in range(20)]
        await group.until_answered(20)
        for member in group.members.values():
            member.stop()
    frames = await frames_per_turn(log)
    assert all(turn is not None and frames[turn.seq] == 1 for turn in turns)
    await log.aclose()
