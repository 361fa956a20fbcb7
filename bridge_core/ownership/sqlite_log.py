"""The embedded conversation log: SQLite tables ``log_*`` in the gateway's one database file.

One writer: every write of this handle (admissions, frames, joins, leaves, heartbeats, reaps)
is queued and the handle's writer thread commits everything queued in one ``BEGIN IMMEDIATE``
transaction (group commit, ``sqlite_commit.py``); a write that fails sends its batch through
again with one savepoint per write, so one failure does not undo the others. The file is in WAL
mode with ``synchronous=FULL``: an admitted turn survives a power cut, and a turn admitted but
not answered before a crash is answered after it.

``inserted_at`` is the writer's wall clock read under the write lock, never less than the
channel's previous record, so it is monotonic even if the clock steps back. Admission checks
``log_seen`` (the durable dedup of platform message ids) and appends the turn in the same
transaction. Readers of other handles on the same file (other processes) see new records by
polling every ``poll_interval`` seconds; members in this process are woken at once.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import anyio

from bridge_core.conversation import Frame, Join, Leave, LeaveReason, LogRecord, Turn
from bridge_core.conversation import conversation_id as make_conversation_id
from bridge_core.ownership.backlog import rewind_members
from bridge_core.ownership.fold_share import FoldShares
from bridge_core.ownership.log import (
    DEFAULT_RETENTION,
    DEFAULT_SEEN_TTL,
    Backlog,
    JoinResult,
    LogStatistics,
    LogUnavailable,
)
from bridge_core.ownership.loop_native import LoopEvent, LoopNative, loop_native
from bridge_core.ownership.read_cache import ReadCache
from bridge_core.ownership.sqlite_commit import LogTx, LogWriter
from bridge_core.ownership.sqlite_ops import (
    Admission,
    Answer,
    Heartbeat,
    JoinGroup,
    LeaveGroup,
    Reap,
)
from bridge_core.provider import InboundMessage

__all__ = ["SCHEMA", "SqliteConversationLog"]

T = TypeVar("T")

SCHEMA = """
CREATE TABLE IF NOT EXISTS log_records (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    channel TEXT NOT NULL,
    kind TEXT NOT NULL,
    inserted_at REAL NOT NULL,
    conversation TEXT,
    message_id TEXT,
    author TEXT,
    body TEXT,
    thread TEXT,
    answers_seq INTEGER,
    member TEXT,
    obligation TEXT,
    since REAL,
    reason TEXT
);
CREATE INDEX IF NOT EXISTS log_records_channel ON log_records (channel, seq);
CREATE INDEX IF NOT EXISTS log_records_time ON log_records (channel, inserted_at);
CREATE INDEX IF NOT EXISTS log_records_conversation
    ON log_records (channel, conversation, seq) WHERE conversation IS NOT NULL;
CREATE TABLE IF NOT EXISTS log_seen (
    channel TEXT NOT NULL,
    message_id TEXT NOT NULL,
    seen_at REAL NOT NULL,
    PRIMARY KEY (channel, message_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS log_seen_time ON log_seen (seen_at);
CREATE TABLE IF NOT EXISTS log_members (
    channel TEXT NOT NULL,
    member TEXT NOT NULL,
    since REAL NOT NULL,
    beat_at REAL NOT NULL,
    PRIMARY KEY (channel, member)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS log_counters (
    channel TEXT PRIMARY KEY,
    admitted INTEGER NOT NULL DEFAULT 0,
    answered INTEGER NOT NULL DEFAULT 0
);
"""

_COLUMNS = (
    "seq, channel, kind, inserted_at, conversation, message_id, author, body, thread, "
    "answers_seq, member, obligation, since, reason"
)
_PRUNE_EVERY = 1000


def _record(row: tuple[Any, ...]) -> LogRecord:
    (seq, channel, kind, at, conv, message_id, author, body, thread) = row[:9]
    (answers_seq, member, obligation, since, reason) = row[9:]
    if kind == "turn":
        return Turn(channel, conv, seq, at, message_id, author, body, thread)
    if kind == "frame":
        return Frame(channel, conv, seq, at, answers_seq, member, obligation)
    if kind == "join":
        return Join(channel, seq, at, member, since)
    return Leave(channel, seq, at, member, LeaveReason(reason))


class SqliteConversationLog:
    """A ``ConversationLog`` in a SQLite file. Open with ``await SqliteConversationLog.open``."""

    def __init__(
        self,
        writer: sqlite3.Connection,
        reader: sqlite3.Connection,
        *,
        channel: str,
        seen_ttl: float,
        retention: float,
        clock: Callable[[], float],
        poll_interval: float,
    ) -> None:
        self.channel = channel
        self.seen_ttl = seen_ttl
        self.retention = retention
        self.poll_interval = poll_interval
        self._clock = clock
        self._reader = reader
        self._read_lock = anyio.CapacityLimiter(1)
        # made by a reader about to wait, set (and dropped) once per commit
        self._changed: LoopEvent | None = None
        # the event a reader waits on with a timeout, and when that reader stops waiting
        self._timer_event: LoopEvent | None = None
        self._timer_until = 0.0
        self._admits = 0
        self.prune_every = _PRUNE_EVERY  # admissions between prunes of old ids and records
        # members of this process read recent records from here, not each from the file
        self._cache = ReadCache(poll_interval)
        # ... and fold the records once for all of them (ADR 0146)
        self.fold_shares = FoldShares()
        self.db_reads = 0
        self._writer = LogWriter(
            writer,
            channel=channel,
            clock=clock,
            on_commit=self._committed,
            after_wake=self._wake_readers,
        )

    @classmethod
    async def open(
        cls,
        path: str,
        *,
        channel: str,
        seen_ttl: float = DEFAULT_SEEN_TTL,
        retention: float = DEFAULT_RETENTION,
        clock: Callable[[], float] = time.time,
        poll_interval: float = 0.05,
    ) -> SqliteConversationLog:
        """Open (creating the tables if needed) ``channel``'s log in the SQLite file ``path``.

        Admitted message ids are kept ``seen_ttl`` seconds, turns and frames ``retention``
        seconds (both pruned every 1000 admissions); ``clock`` is the writer's wall clock.
        """

        def connect() -> tuple[sqlite3.Connection, sqlite3.Connection]:
            writer = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            writer.execute("PRAGMA busy_timeout = 10000")
            writer.execute("PRAGMA journal_mode = WAL")
            writer.execute("PRAGMA synchronous = FULL")
            writer.executescript(SCHEMA)
            reader = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            reader.execute("PRAGMA busy_timeout = 10000")
            return writer, reader

        try:
            writer, reader = await anyio.to_thread.run_sync(connect)
        except sqlite3.Error as error:
            raise LogUnavailable(
                f"cannot open the conversation log in SQLite file {path!r}: {error}"
            ) from error
        return cls(
            writer,
            reader,
            channel=channel,
            seen_ttl=seen_ttl,
            retention=retention,
            clock=clock,
            poll_interval=poll_interval,
        )

    # ------------------------------------------------------------------ group commit

    @property
    def commits(self) -> int:
        """Transactions committed by this handle's writer."""
        return self._writer.commits

    def _submit(self, op: Callable[[LogTx], T]) -> Awaitable[T]:
        return self._writer.submit(op)

    def _committed(self, tx: LogTx | None, now: float) -> None:
        if tx is not None and tx.pruned:
            self._cache.reset()  # it may hold pruned records
        if tx is not None and tx.loaded:
            self._cache.wrote(tx.prev_seq, tx.created, now=now)

    def _wake_readers(self) -> None:
        changed, self._changed = self._changed, None
        if changed is not None:
            changed.set()

    async def _read(self, query: Callable[[sqlite3.Connection], T]) -> T:
        try:
            return await anyio.to_thread.run_sync(query, self._reader, limiter=self._read_lock)
        except sqlite3.Error as error:
            raise LogUnavailable(f"conversation log read failed: {error}") from error

    # ------------------------------------------------------------------ writes

    async def admit(self, message: InboundMessage) -> Turn | None:
        if message.author_is_bot:
            return None
        conversation = make_conversation_id(
            message.channel, thread=message.thread, author=message.author
        )
        self._admits += 1
        admission = Admission(
            message_id=message.message_id,
            author=message.author,
            text=message.text,
            thread=message.thread,
            conversation=conversation,
            prune=(
                (self.seen_ttl, self.retention) if self._admits % self.prune_every == 0 else None
            ),
        )
        return await self._submit(admission)

    async def record_frame(self, turn: Turn, member: str, obligation: str) -> Frame:
        return await self._submit(Answer(turn, member, obligation))

    async def join(self, member: str, *, settle: float) -> JoinResult:
        return await self._submit(JoinGroup(member, settle))

    async def leave(self, member: str) -> Leave | None:
        return await self._submit(LeaveGroup(member))

    async def heartbeat(self, member: str) -> bool:
        return await self._submit(Heartbeat(member))

    async def reap(self, *, expiry: float) -> list[Leave]:
        return await self._submit(Reap(expiry))

    # ------------------------------------------------------------------ reads

    async def read(
        self, *, after_seq: int, limit: int = 1000, wait: float = 0.0
    ) -> list[LogRecord]:
        def query(conn: sqlite3.Connection) -> list[LogRecord]:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM log_records WHERE channel = ? AND seq > ? "
                "ORDER BY seq LIMIT ?",
                (self.channel, after_seq, limit),
            ).fetchall()
            return [_record(row) for row in rows]

        native = loop_native()
        deadline: float | None = None
        while True:
            changed = self._changed
            if changed is None:
                changed = self._changed = native.event()
            now = native.clock()
            cached = self._cache.read(after_seq, limit, now=now)
            if cached is not None:
                records = cached
            else:
                records = await self._read(query)
                self.db_reads += 1
                now = native.clock()
                self._cache.fetched(after_seq, records, complete=len(records) < limit, now=now)
            if records or wait <= 0:
                return records
            if deadline is None:
                deadline = now + wait
            remaining = deadline - now
            if remaining <= 0:
                return records
            await self._wait(changed, now + min(remaining, self.poll_interval), native)

    async def _wait(self, changed: LoopEvent, until: float, native: LoopNative) -> None:
        """Wait for the next commit of this handle, or until ``until`` on the loop's clock.

        The readers of a handle wait on one event, and one timer sets it if no commit does by
        its time, so every reader wakes by then to poll the file for other processes' writes.
        A reader whose own time is not earlier than the timer's just waits; otherwise it sets
        the timer (on asyncio the loop's own; under trio it waits with a timeout and sets the
        event when it stops waiting, for any reason, cancellation included).
        """
        if self._timer_event is changed and self._timer_until <= until:
            await changed.wait()
            return
        self._timer_event, self._timer_until = changed, until
        if native.call_at is not None:
            timer = native.call_at(until, self._poll_due, changed)
            try:
                await changed.wait()
            finally:
                if changed.is_set():
                    timer.cancel()  # a commit woke the readers; else it still has to
            return
        try:
            with anyio.move_on_after(until - native.clock()):
                await changed.wait()
        finally:
            self._poll_due(changed)

    def _poll_due(self, changed: LoopEvent) -> None:
        """The readers' timer: wake them if no commit did (an unset ``changed`` is still the
        readers' event: it is replaced only when it is set)."""
        if not changed.is_set():
            self._wake_readers()

    async def read_back(
        self, *, before_seq: int, members: Mapping[str, float], not_before: float
    ) -> Backlog:
        def query(conn: sqlite3.Connection) -> tuple[list[LogRecord], dict[int, float]]:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM log_records WHERE channel = ? AND seq < ? "
                "AND inserted_at >= ? ORDER BY seq",
                (self.channel, before_seq, not_before),
            ).fetchall()
            leave_since = {row[0]: row[12] for row in rows if row[2] == "leave"}
            return [_record(row) for row in rows], leave_since

        records, leave_since = await self._read(query)
        return Backlog(rewind_members(members, records, leave_since), records)

    async def recent_history(
        self, conversation: str, limit: int = 20, *, up_to_seq: int | None = None
    ) -> list[Turn | Frame]:
        def query(conn: sqlite3.Connection) -> list[Turn | Frame]:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM log_records WHERE channel = ? AND conversation = ? "
                "AND seq <= ? ORDER BY seq DESC LIMIT ?",
                (self.channel, conversation, up_to_seq if up_to_seq is not None else 2**62, limit),
            ).fetchall()
            out = [_record(row) for row in reversed(rows)]
            return [r for r in out if isinstance(r, Turn | Frame)]

        return await self._read(query)

    async def statistics(self) -> LogStatistics:
        def query(conn: sqlite3.Connection) -> LogStatistics:
            members = conn.execute(
                "SELECT COUNT(*) FROM log_members WHERE channel = ?", (self.channel,)
            ).fetchone()[0]
            row = conn.execute(
                "SELECT admitted, answered FROM log_counters WHERE channel = ?", (self.channel,)
            ).fetchone()
            return LogStatistics(members, *(row or (0, 0)))

        return await self._read(query)

    async def aclose(self) -> None:
        await self._writer.aclose()  # what is queued is committed first
        await anyio.to_thread.run_sync(self._reader.close, limiter=self._read_lock)
