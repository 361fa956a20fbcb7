"""An in-process conversation log: the reference backend, and the one virtual-time tests use.

Several ``MemoryConversationLog`` handles built on one ``MemoryLogStore`` are members' views of
the same channel log. Time comes from ``clock`` (``anyio.current_time`` under a mock clock).
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import anyio

from bridge_core.conversation import Frame, Join, Leave, LeaveReason, LogRecord, Turn
from bridge_core.conversation import conversation_id as make_conversation_id
from bridge_core.ownership.backlog import rewind_members
from bridge_core.ownership.log import Backlog, JoinResult, LogStatistics
from bridge_core.provider import InboundMessage

__all__ = ["MemoryConversationLog", "MemoryLogStore"]


@dataclass
class MemoryLogStore:
    """The shared state of one channel's in-memory log."""

    clock: Callable[[], float] = time.time
    records: list[LogRecord] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)
    members: dict[str, float] = field(default_factory=dict)
    beats: dict[str, float] = field(default_factory=dict)
    leave_since: dict[int, float] = field(default_factory=dict)
    admitted: int = 0
    answered: int = 0
    changed: anyio.Event = field(default_factory=anyio.Event)
    last_at: float = 0.0

    def now(self) -> float:
        # monotonic like the other backends: never before the previous record
        self.last_at = max(self.clock(), self.last_at)
        return self.last_at

    def append(self, record: LogRecord) -> None:
        self.records.append(record)
        self.changed.set()
        self.changed = anyio.Event()

    @property
    def next_seq(self) -> int:
        return len(self.records) + 1


class MemoryConversationLog:
    """A ``ConversationLog`` over a ``MemoryLogStore`` (one handle per member is fine)."""

    def __init__(self, store: MemoryLogStore, *, channel: str) -> None:
        self.store = store
        self.channel = channel
        self.closed = False

    async def admit(self, message: InboundMessage) -> Turn | None:
        s = self.store
        if message.author_is_bot or message.message_id in s.seen:
            return None
        s.seen.add(message.message_id)
        turn = Turn(
            channel=self.channel,
            conversation=make_conversation_id(
                message.channel, thread=message.thread, author=message.author
            ),
            seq=s.next_seq,
            inserted_at=s.now(),
            message_id=message.message_id,
            author=message.author,
            text=message.text,
            thread=message.thread,
        )
        s.admitted += 1
        s.append(turn)
        return turn

    async def record_frame(self, turn: Turn, member: str, obligation: str) -> Frame:
        s = self.store
        frame = Frame(
            channel=self.channel,
            conversation=turn.conversation,
            seq=s.next_seq,
            inserted_at=s.now(),
            answers_seq=turn.seq,
            member=member,
            obligation=obligation,
        )
        s.answered += 1
        s.append(frame)
        return frame

    async def join(self, member: str, *, settle: float) -> JoinResult:
        s = self.store
        before = dict(s.members)
        at = s.now()
        join = Join(self.channel, s.next_seq, at, member, at + settle)
        s.members[member] = join.since
        s.beats[member] = at
        s.append(join)
        return JoinResult(join, before)

    def _leave(self, member: str, reason: LeaveReason) -> Leave | None:
        s = self.store
        since = s.members.pop(member, None)
        s.beats.pop(member, None)
        if since is None:
            return None
        leave = Leave(self.channel, s.next_seq, s.now(), member, reason)
        s.leave_since[leave.seq] = since
        s.append(leave)
        return leave

    async def leave(self, member: str) -> Leave | None:
        return self._leave(member, LeaveReason.GRACEFUL)

    async def heartbeat(self, member: str) -> bool:
        s = self.store
        if member not in s.members:
            return False
        s.beats[member] = s.now()
        return True

    async def reap(self, *, expiry: float) -> list[Leave]:
        s = self.store
        now = s.now()
        out = []
        for member, beat in sorted(s.beats.items()):
            if now - beat > expiry:
                leave = self._leave(member, LeaveReason.EXPIRED)
                if leave is not None:
                    out.append(leave)
        return out

    async def read(
        self, *, after_seq: int, limit: int = 1000, wait: float = 0.0
    ) -> list[LogRecord]:
        s = self.store
        if len(s.records) <= after_seq and wait > 0:
            changed = s.changed
            with anyio.move_on_after(wait):
                await changed.wait()
        return list(s.records[max(after_seq, 0) : max(after_seq, 0) + limit])

    async def read_back(
        self, *, before_seq: int, members: Mapping[str, float], not_before: float
    ) -> Backlog:
        s = self.store
        end = max(0, min(before_seq - 1, len(s.records)))
        times = [r.inserted_at for r in s.records[:end]]
        start = bisect.bisect_left(times, not_before)
        records = s.records[start:end]
        return Backlog(rewind_members(members, records, s.leave_since), records)

    async def recent_history(
        self, conversation: str, limit: int = 20, *, up_to_seq: int | None = None
    ) -> list[Turn | Frame]:
        out: list[Turn | Frame] = []
        for record in reversed(self.store.records):
            if len(out) >= limit:
                break
            if up_to_seq is not None and record.seq > up_to_seq:
                continue
            if isinstance(record, Turn | Frame) and record.conversation == conversation:
                out.append(record)
        out.reverse()
        return out

    async def statistics(self) -> LogStatistics:
        s = self.store
        return LogStatistics(len(s.members), s.admitted, s.answered)

    async def aclose(self) -> None:
        self.closed = True
