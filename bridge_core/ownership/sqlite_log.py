"""The embedded conversation log: SQLite tables ``log_*`` in the gateway's one database file.

One writer: every write of this handle (admissions, frames, joins, leaves, heartbeats, reaps)
is queued and the first waiting caller commits the whole queue in one ``BEGIN IMMEDIATE``
transaction in a worker thread (group commit), each write in its own savepoint so one failure
does not undo the others. The file is in WAL mode with ``synchronous=FULL``: an admitted turn
survives a power cut, and a turn admitted but not answered before a crash is answered after it.

``inserted_at`` is the writer's wall clock read under the write lock, never less than the
channel's previous record, so it is monotonic even if the clock steps back. Admission checks
``log_seen`` (the durable dedup of platform message ids) and appends the turn in the same
transaction. Readers of other handles on the same file (other processes) see new records by
polling every ``poll_interval`` seconds; members in this process are woken at once.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
import anyio.lowlevel

from bridge_core.conversation import Frame, Join, Leave, LeaveReason, LogRecord, Turn
from bridge_core.conversation import conversation_id as make_conversation_id
from bridge_core.ownership.backlog import rewind_members
from bridge_core.ownership.log import (
    DEFAULT_RETENTION,
    DEFAULT_SEEN_TTL,
    Backlog,
    JoinResult,
    LogStatistics,
    LogUnavailable,
)
from bridge_core.ownership.read_cache import ReadCache
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


class _Tx:
    """What a queued write sees: the connection and the log's clock for this channel."""

    def __init__(self, conn: sqlite3.Connection, channel: str, clock: Callable[[], float]) -> None:
        self.conn = conn
        self.channel = channel
        self._clock = clock
        self._last: float | None = None
        self.prev_seq = 0  # the channel's last seq before this transaction's first insert
        self.created: list[LogRecord] = []
        self.pruned = False
        self.defer_counts = False
        self.counts: dict[str, int] = {}

    @property
    def loaded(self) -> bool:
        """Whether ``prev_seq`` was read (every write that appends or admits reads it)."""
        return self._last is not None

    def now(self) -> float:
        if self._last is None:
            row = self.conn.execute(
                "SELECT seq, inserted_at FROM log_records WHERE channel = ? "
                "ORDER BY seq DESC LIMIT 1",
                (self.channel,),
            ).fetchone()
            self.prev_seq, self._last = row if row else (0, 0.0)
        self._last = max(self._clock(), self._last)
        return self._last

    def insert(self, kind: str, *, at: float | None = None, **values: Any) -> tuple[int, float]:
        at = self.now() if at is None else at
        names = ", ".join(("channel", "kind", "inserted_at", *values))
        marks = ", ".join("?" * (3 + len(values)))
        cursor = self.conn.execute(
            f"INSERT INTO log_records ({names}) VALUES ({marks})",
            (self.channel, kind, at, *values.values()),
        )
        assert cursor.lastrowid is not None
        return cursor.lastrowid, at

    def count(self, column: str) -> None:
        if self.defer_counts:
            self.counts[column] = self.counts.get(column, 0) + 1
        else:
            self._add(column, 1)

    def flush_counts(self) -> None:
        for column, n in self.counts.items():
            self._add(column, n)
        self.counts.clear()

    def _add(self, column: str, n: int) -> None:
        self.conn.execute(
            f"INSERT INTO log_counters (channel, {column}) VALUES (?, ?) "
            f"ON CONFLICT (channel) DO UPDATE SET {column} = {column} + excluded.{column}",
            (self.channel, n),
        )


@dataclass(eq=False, slots=True)
class _Write:
    op: Callable[[_Tx], Any]
    result: Any = None
    error: BaseException | None = None


@dataclass(eq=False, slots=True)
class _Queue:
    """The writes of one group commit; their callers all wait on its one event."""

    writes: list[_Write] = field(default_factory=list)
    done: anyio.Event = field(default_factory=anyio.Event)


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
        self._writer = writer
        self._reader = reader
        self._write_lock = anyio.CapacityLimiter(1)
        self._read_lock = anyio.CapacityLimiter(1)
        self._queue: _Queue | None = None
        self._writing = False
        self._changed = anyio.Event()
        self._admits = 0
        self.prune_every = _PRUNE_EVERY  # admissions between prunes of old ids and records
        self.commits = 0
        # members of this process read recent records from here, not each from the file
        self._cache = ReadCache(poll_interval)
        self.db_reads = 0

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

    async def _submit(self, op: Callable[[_Tx], T]) -> T:
        write = _Write(op)
        queue = self._queue
        if queue is None:
            queue = self._queue = _Queue()
        queue.writes.append(write)
        if not self._writing:
            self._writing = True
            try:
                # the drain must finish for every queued caller, even if this one is cancelled
                with anyio.CancelScope(shield=True):
                    while self._queue is not None:
                        # let the callers woken by the last commit queue their next writes, so
                        # batches grow with the load instead of alternating big and small
                        await anyio.lowlevel.checkpoint()
                        batch, self._queue = self._queue, None
                        tx = await anyio.to_thread.run_sync(
                            self._commit, batch.writes, limiter=self._write_lock
                        )
                        if tx is not None and tx.pruned:
                            self._cache.reset()  # it may hold pruned records
                        if tx is not None and tx.loaded:
                            self._cache.wrote(tx.prev_seq, tx.created)
                        batch.done.set()  # one wake-up call for the whole commit
                        self._changed.set()
                        self._changed = anyio.Event()
            finally:
                self._writing = False
        await queue.done.wait()
        if write.error is not None:
            raise write.error
        result: T = write.result
        return result

    def _commit(self, batch: list[_Write]) -> _Tx | None:
        """Commit ``batch`` in one transaction; returns the transaction's account, or ``None``
        when the commit itself failed (every write then fails with ``LogUnavailable``)."""
        conn = self._writer
        tx = _Tx(conn, self.channel, self._clock)
        tx.defer_counts = True
        try:
            # fast path: no savepoints; an op that fails sends the batch the careful way
            conn.execute("BEGIN IMMEDIATE")
            for item in batch:
                item.result = item.op(tx)
            tx.flush_counts()
            conn.execute("COMMIT")
            self.commits += 1
            return tx
        except Exception:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
        return self._commit_carefully(batch)

    def _commit_carefully(self, batch: list[_Write]) -> _Tx | None:
        """One savepoint per write, so a failing write does not undo the others."""
        conn = self._writer
        tx = _Tx(conn, self.channel, self._clock)
        try:
            conn.execute("BEGIN IMMEDIATE")
            for index, item in enumerate(batch):
                conn.execute(f"SAVEPOINT w{index}")
                created = len(tx.created)
                try:
                    item.result = item.op(tx)
                except Exception as error:
                    conn.execute(f"ROLLBACK TO w{index}")
                    del tx.created[created:]
                    item.error = error
                conn.execute(f"RELEASE w{index}")
            conn.execute("COMMIT")
            self.commits += 1
            return tx
        except sqlite3.Error as error:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            failure = LogUnavailable(f"conversation log commit failed: {error}")
            for item in batch:
                item.result, item.error = None, failure
            return None

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
        prune = self._admits % self.prune_every == 0

        def op(tx: _Tx) -> Turn | None:
            now = tx.now()
            if prune:
                tx.conn.execute("DELETE FROM log_seen WHERE seen_at < ?", (now - self.seen_ttl,))
                tx.conn.execute(
                    "DELETE FROM log_records WHERE channel = ? AND inserted_at < ?",
                    (self.channel, now - self.retention),
                )
                tx.pruned = True
            cursor = tx.conn.execute(
                "INSERT OR IGNORE INTO log_seen (channel, message_id, seen_at) VALUES (?, ?, ?)",
                (self.channel, message.message_id, now),
            )
            if cursor.rowcount == 0:
                return None
            seq, at = tx.insert(
                "turn",
                conversation=conversation,
                message_id=message.message_id,
                author=message.author,
                body=message.text,
                thread=message.thread,
            )
            tx.count("admitted")
            turn = Turn(
                self.channel,
                conversation,
                seq,
                at,
                message.message_id,
                message.author,
                message.text,
                message.thread,
            )
            tx.created.append(turn)
            return turn

        return await self._submit(op)

    async def record_frame(self, turn: Turn, member: str, obligation: str) -> Frame:
        def op(tx: _Tx) -> Frame:
            seq, at = tx.insert(
                "frame",
                conversation=turn.conversation,
                answers_seq=turn.seq,
                member=member,
                obligation=obligation,
            )
            tx.count("answered")
            frame = Frame(self.channel, turn.conversation, seq, at, turn.seq, member, obligation)
            tx.created.append(frame)
            return frame

        return await self._submit(op)

    async def join(self, member: str, *, settle: float) -> JoinResult:
        def op(tx: _Tx) -> JoinResult:
            before = dict(
                tx.conn.execute(
                    "SELECT member, since FROM log_members WHERE channel = ?", (self.channel,)
                ).fetchall()
            )
            at = tx.now()
            seq, _ = tx.insert("join", at=at, member=member, since=at + settle)
            tx.conn.execute(
                "INSERT OR REPLACE INTO log_members (channel, member, since, beat_at) "
                "VALUES (?, ?, ?, ?)",
                (self.channel, member, at + settle, at),
            )
            join = Join(self.channel, seq, at, member, at + settle)
            tx.created.append(join)
            return JoinResult(join, before)

        return await self._submit(op)

    @staticmethod
    def _remove(tx: _Tx, member: str, since: float, reason: LeaveReason) -> Leave:
        tx.conn.execute(
            "DELETE FROM log_members WHERE channel = ? AND member = ?", (tx.channel, member)
        )
        seq, at = tx.insert("leave", member=member, since=since, reason=reason.value)
        leave = Leave(tx.channel, seq, at, member, reason)
        tx.created.append(leave)
        return leave

    async def leave(self, member: str) -> Leave | None:
        def op(tx: _Tx) -> Leave | None:
            row = tx.conn.execute(
                "SELECT since FROM log_members WHERE channel = ? AND member = ?",
                (self.channel, member),
            ).fetchone()
            if row is None:
                return None
            return self._remove(tx, member, row[0], LeaveReason.GRACEFUL)

        return await self._submit(op)

    async def heartbeat(self, member: str) -> bool:
        def op(tx: _Tx) -> bool:
            cursor = tx.conn.execute(
                "UPDATE log_members SET beat_at = ? WHERE channel = ? AND member = ?",
                (self._clock(), self.channel, member),
            )
            return cursor.rowcount == 1

        return await self._submit(op)

    async def reap(self, *, expiry: float) -> list[Leave]:
        def op(tx: _Tx) -> list[Leave]:
            rows = tx.conn.execute(
                "SELECT member, since FROM log_members WHERE channel = ? AND beat_at < ? "
                "ORDER BY member",
                (self.channel, self._clock() - expiry),
            ).fetchall()
            return [self._remove(tx, m, since, LeaveReason.EXPIRED) for m, since in rows]

        return await self._submit(op)

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

        deadline = anyio.current_time() + wait
        while True:
            changed = self._changed
            cached = self._cache.read(after_seq, limit)
            if cached is not None:
                records = cached
            else:
                records = await self._read(query)
                self.db_reads += 1
                self._cache.fetched(after_seq, records, complete=len(records) < limit)
            remaining = deadline - anyio.current_time()
            if records or remaining <= 0:
                return records
            with anyio.move_on_after(min(remaining, self.poll_interval)):
                await changed.wait()

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
        def close() -> None:
            self._writer.close()
            self._reader.close()

        await anyio.to_thread.run_sync(close, limiter=self._write_lock)
