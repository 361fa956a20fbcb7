"""Members of one log handle share one fold (ADR 0146): each turn is still answered by exactly
one member, across joins and leaves, and the fold routes to each member exactly what its own
view would have delivered."""

from __future__ import annotations

import itertools
import random
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import pytest

from bridge_core.conversation import Frame, Join, Leave, LeaveReason, LogRecord, Turn
from bridge_core.ownership import AgentGroupMember, GroupView
from bridge_core.ownership.fold_share import SharedMemberView
from bridge_core.ownership.sqlite_log import SqliteConversationLog
from bridge_core.provider import InboundMessage

CH = "C"


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)  # real I/O (the SQLite writer thread): real clocks, both loops


def random_history(seed: int) -> list[LogRecord]:
    """Joins (some settling), graceful and expired leaves, turns, and frames of some turns."""
    rng = random.Random(seed)
    records: list[LogRecord] = []
    seqs = itertools.count(1)
    t = 100.0
    present: list[str] = []
    names = (f"m{i}" for i in itertools.count())
    turns: list[Turn] = []
    for _ in range(1500):
        t += rng.random() * 0.1
        seq = next(seqs)
        action = rng.random()
        if action < 0.04 or len(present) < 1:
            member = next(names)
            records.append(Join(CH, seq, t, member, t + rng.choice([0.0, 0.3, 2.0])))
            present.append(member)
        elif action < 0.07:
            member = present.pop(rng.randrange(len(present)))
            reason = rng.choice([LeaveReason.GRACEFUL, LeaveReason.EXPIRED])
            records.append(Leave(CH, seq, t, member, reason))
        elif action < 0.09 and present:
            # everyone leaves at once now and then: orphans, adopted at the next join
            for member in present:
                records.append(Leave(CH, seq, t, member, LeaveReason.EXPIRED))
                seq = next(seqs)
            present.clear()
            records.append(Join(CH, seq, t, next(names), t))
            present.append(records[-1].member)  # type: ignore[union-attr]
        elif action < 0.25 and turns:
            turn = turns.pop(rng.randrange(len(turns)))
            records.append(Frame(CH, turn.conversation, seq, t, turn.seq, "x", f"o{turn.seq}"))
        else:
            author = f"user{rng.randrange(60)}"
            turn = Turn(CH, f"{CH}/u/{author}", seq, t, f"m{seq}", author, "hi")
            records.append(turn)
            turns.append(turn)
    return records


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_routed_fold_gives_each_member_what_its_own_view_delivers(seed: int) -> None:
    records = random_history(seed)
    everyone = sorted({r.member for r in records if isinstance(r, Join)})
    shared = GroupView(me=None, max_conversations=50)
    routed: dict[str, list[int]] = {member: [] for member in everyone}
    for record in records:
        for turn, owner in shared.apply_routed(record):
            routed[owner].append(turn.seq)
    moved = 0
    for member in everyone:
        own = GroupView(me=member, max_conversations=50)
        delivered = [turn.seq for turn in own.apply_all(records)]
        assert routed[member] == delivered, member
        moved += own.statistics().taken_over + own.statistics().orphans_adopted
    assert moved > 0  # the history exercised takeovers and orphans, not only new turns
    assert sum(map(len, routed.values())) > shared.statistics().turns


def message(i: int, prefix: str = "x") -> InboundMessage:
    return InboundMessage(
        message_id=f"{prefix}{i}", channel="C", author=f"u{i % 23}", text="t", at=0
    )


class Handle:
    """Members of one SQLite handle; records who was handed which turn and who answered it."""

    def __init__(self, log: SqliteConversationLog) -> None:
        self.log = log
        self.members: dict[str, AgentGroupMember] = {}
        self.delivered: list[tuple[str, int]] = []
        self.hung: set[str] = set()  # members whose agent never answers from now on
        self.changed = anyio.Event()

    def add(self, name: str, **options: Any) -> AgentGroupMember:
        async def on_turn(turn: Turn, history: Any) -> None:
            member = self.members[name]
            assert member.current_id is not None
            assert history and history[-1] == turn
            self.delivered.append((member.current_id, turn.seq))
            self.changed.set()
            if name in self.hung:
                await anyio.sleep_forever()
            await member.record_frame(turn, f"o{turn.seq}")
            self.changed.set()

        member = AgentGroupMember(
            self.log,
            member_id=name,
            on_turn=on_turn,
            settle=options.pop("settle", 0.05),
            heartbeat=0.2,
            **options,
        )
        self.members[name] = member
        return member

    async def until(self, done: Any) -> None:
        with anyio.fail_after(20):
            while not await done():
                self.changed = anyio.Event()
                with anyio.move_on_after(0.1):  # a frame can come from another member
                    await self.changed.wait()

    async def answered(self) -> int:
        return (await self.log.statistics()).turns_answered


async def frames_per_turn(log: SqliteConversationLog) -> Counter[int]:
    records = await log.read(after_seq=0, limit=100_000)
    return Counter(r.answers_seq for r in records if isinstance(r, Frame))


@pytest.mark.anyio
async def test_members_of_one_handle_answer_each_turn_once_across_a_join_and_a_leave(
    tmp_path: Path,
) -> None:
    log = await SqliteConversationLog.open(
        str(tmp_path / "bridge.db"), channel="C", poll_interval=0.02
    )
    handle = Handle(log)
    turns: list[Turn] = []

    async def admit(count: int, prefix: str) -> None:
        for i in range(count):
            turn = await log.admit(message(i, prefix))
            assert turn is not None
            turns.append(turn)

    async with anyio.create_task_group() as tg:
        for name in ("a", "b", "c"):
            tg.start_soon(handle.add(name).run)
        for member in handle.members.values():
            await member.ready.wait()
        # they share one fold, and each sees itself in it
        views = [member.view for member in handle.members.values()]
        assert all(isinstance(view, SharedMemberView) for view in views)
        await handle.until(lambda: _all_delivering(handle))
        await admit(60, "x")
        await handle.until(lambda: _answered(handle, len(turns)))
        # a join: the newcomer takes only turns committed after its since
        tg.start_soon(handle.add("d", settle=0.0).run)
        await handle.members["d"].ready.wait()
        await handle.until(lambda: _all_delivering(handle))
        await admit(60, "y")
        await handle.until(lambda: _answered(handle, len(turns)))
        # a leave with turns held: b's agent stops answering; its held and queued turns move
        handle.hung.add("b")
        b_id = handle.members["b"].current_id
        await admit(60, "z")
        await handle.until(lambda: _b_holds_some(handle, b_id))
        handle.members["b"].drain_timeout = 0.0
        handle.members["b"].stop()
        await handle.until(lambda: _answered(handle, len(turns)))
        for member in handle.members.values():
            member.stop()
    frames = await frames_per_turn(log)
    assert all(frames[turn.seq] == 1 for turn in turns), "a turn answered twice, or never"
    handed = Counter(seq for _member, seq in handle.delivered)
    held_by_b = {seq for member, seq in handle.delivered if member == b_id and seq > turns[119].seq}
    assert held_by_b, "the leave moved nothing"
    for turn in turns:
        # handed once; a turn b held without answering once more, to exactly one other member
        assert handed[turn.seq] == (2 if turn.seq in held_by_b else 1), turn.seq
    d_id = handle.members["d"].current_id
    assert any(member == d_id for member, _seq in handle.delivered)
    await log.aclose()


async def _all_delivering(handle: Handle) -> bool:
    return all(member.delivering for member in handle.members.values())


async def _answered(handle: Handle, count: int) -> bool:
    return await handle.answered() >= count


async def _b_holds_some(handle: Handle, b_id: str | None) -> bool:
    return any(member == b_id for member, _seq in handle.delivered[120:])


@pytest.mark.anyio
async def test_after_the_last_member_left_a_new_one_adopts_the_orphans(tmp_path: Path) -> None:
    log = await SqliteConversationLog.open(
        str(tmp_path / "bridge.db"), channel="C", poll_interval=0.02
    )
    handle = Handle(log)
    async with anyio.create_task_group() as tg:
        first = handle.add("a")
        tg.start_soon(first.run)
        await first.ready.wait()
        await handle.until(lambda: _all_delivering(handle))
        turns = [await log.admit(message(i)) for i in range(10)]
        await handle.until(lambda: _answered(handle, 10))
        first.stop()
    # nobody is listed now: turns admitted meanwhile are orphans, and the share kept nothing
    orphans = [await log.admit(message(i, "o")) for i in range(10)]
    async with anyio.create_task_group() as tg:
        handle.members.clear()
        second = handle.add("b")
        tg.start_soon(second.run)
        await handle.until(lambda: _answered(handle, 20))
        second.stop()
    frames = await frames_per_turn(log)
    assert all(t is not None and frames[t.seq] == 1 for t in [*turns, *orphans])
    assert Counter(seq for _m, seq in handle.delivered) == Counter(
        t.seq for t in [*turns, *orphans] if t is not None
    )
    await log.aclose()


@pytest.mark.anyio
async def test_members_with_an_exact_id_or_other_options_fold_alone(tmp_path: Path) -> None:
    log = await SqliteConversationLog.open(str(tmp_path / "bridge.db"), channel="C")
    handle = Handle(log)
    async with anyio.create_task_group() as tg:
        members = [handle.add("a"), handle.add("b", exact_id=True), handle.add("c", lookback=5.0)]
        for member in members:
            tg.start_soon(member.run)
        for member in members:
            await member.ready.wait()
        assert isinstance(members[0].view, SharedMemberView)
        assert isinstance(members[1].view, GroupView)
        assert isinstance(members[2].view, SharedMemberView)
        assert members[0].view._share is not members[2].view._share
        await handle.until(lambda: _all_delivering(handle))
        turns = [await log.admit(message(i)) for i in range(30)]
        await handle.until(lambda: _answered(handle, 30))
        for member in members:
            member.stop()
    frames = await frames_per_turn(log)
    assert all(t is not None and frames[t.seq] == 1 for t in turns)
    await log.aclose()
