"""The SQLite conversation log's group commit: one writer thread per handle (ADR 0132).

Callers queue writes (functions of a ``LogTx``) on the event loop; the writes queued in one turn
of the loop go to the thread together, and the thread commits everything waiting for it in one
``BEGIN IMMEDIATE`` transaction, then wakes the loop once for the whole commit. A caller
returns only after the ``COMMIT`` that holds its write. The thread is the handle's: no event
loop task drives the commits, so no caller waits for another's, and the next batch can go to
the thread before the members of this process fold the last one (``after_wake``): they are
woken when that next batch reaches its ``COMMIT``, so they fold while the thread syncs the file
rather than while it needs the interpreter (ADR 0137).
"""

from __future__ import annotations

import asyncio
import queue
import sqlite3
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol, TypeVar

import anyio
import anyio.lowlevel

from bridge_core.conversation import LogRecord
from bridge_core.ownership.log import LogUnavailable
from bridge_core.ownership.loop_native import LoopEvent

__all__ = ["LogTx", "LogWriter", "Mergeable"]

T = TypeVar("T")

_ROWS_PER_STATEMENT = 500  # 14 values a row at most: well under SQLite's 32,766 variables

# one above the largest seq the table ever held (AUTOINCREMENT's next), from sqlite_sequence
_NEXT_SEQ = (
    "MAX(COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'log_records'), 0),"
    " COALESCE((SELECT MAX(seq) FROM log_records), 0)) + 1"
)
# a transaction's first look at the log: the channel's last record and the next seq, at once
_LOAD = (
    "SELECT (SELECT seq FROM log_records WHERE channel = ? ORDER BY seq DESC LIMIT 1),"
    " (SELECT inserted_at FROM log_records WHERE channel = ? ORDER BY seq DESC LIMIT 1), "
    + _NEXT_SEQ
)

Soon = Callable[[Callable[[], object]], object]


class LogTx:
    """What a queued write sees: the connection and the log's clock for this channel."""

    def __init__(self, conn: sqlite3.Connection, channel: str, clock: Callable[[], float]) -> None:
        self.conn = conn
        self.channel = channel
        self._clock = clock
        self._last: float | None = None
        self.prev_seq = 0  # the channel's last seq before this transaction's first insert
        # the seq insert_many gives next: read with the last record, kept up to date by
        # insert_many, forgotten by insert (AUTOINCREMENT) and by a rolled back write
        self._next_seq: int | None = None
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
            seq, at, self._next_seq = self.conn.execute(
                _LOAD, (self.channel, self.channel)
            ).fetchone()
            self.prev_seq, self._last = (seq, at) if seq is not None else (0, 0.0)
        self._last = max(self._clock(), self._last)
        return self._last

    def rolled_back(self) -> None:
        """A write of this transaction was rolled back (to its savepoint): what it inserted,
        and the seqs it took, are gone."""
        self._next_seq = None

    def insert(self, kind: str, *, at: float | None = None, **values: Any) -> tuple[int, float]:
        at = self.now() if at is None else at
        names = ", ".join(("channel", "kind", "inserted_at", *values))
        marks = ", ".join("?" * (3 + len(values)))
        cursor = self.conn.execute(
            f"INSERT INTO log_records ({names}) VALUES ({marks})",
            (self.channel, kind, at, *values.values()),
        )
        assert cursor.lastrowid is not None
        self._next_seq = None  # AUTOINCREMENT took the next one
        return cursor.lastrowid, at

    def insert_many(
        self, kind: str, names: tuple[str, ...], rows: list[tuple[Any, ...]]
    ) -> list[tuple[int, float]]:
        """Append ``rows`` (values of ``names``) as records of ``kind``, in their order, in one
        statement per 500 rows; returns each one's ``(seq, inserted_at)``.

        Each row is stamped by ``now()`` as ``insert`` stamps it. Seqs are given, not left to
        AUTOINCREMENT: one above the largest the table ever held (``sqlite_sequence``, which
        SQLite raises to a given seq too), in row order, which is what AUTOINCREMENT would give
        rows inserted one by one under this transaction's write lock. The transaction's first
        ``now()`` read that seq with the channel's last record (under the lock nobody else
        appends), so most transactions spend no statement on it.
        """
        stamps = [self.now() for _row in rows]  # the first of a transaction loads _next_seq
        first = self._next_seq
        if first is None:
            first = self.conn.execute("SELECT " + _NEXT_SEQ).fetchone()[0]
        self._next_seq = first + len(rows)
        stamped = [(first + index, at) for index, at in enumerate(stamps)]
        columns = ", ".join(("seq", "inserted_at", "channel", "kind", *names))
        marks = "(" + ", ".join("?" * (4 + len(names))) + ")"
        channel = self.channel
        for start in range(0, len(rows), _ROWS_PER_STATEMENT):
            chunk = range(start, min(start + _ROWS_PER_STATEMENT, len(rows)))
            values: list[Any] = []
            for index in chunk:
                values += (*stamped[index], channel, kind)
                values += rows[index]
            self.conn.execute(
                f"INSERT INTO log_records ({columns}) VALUES {', '.join([marks] * len(chunk))}",
                values,
            )
        return stamped

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
    op: Callable[[LogTx], Any]
    result: Any = None
    error: BaseException | None = None


@dataclass(eq=False, slots=True)
class _Group:
    """The writes one event loop queued in one of its turns; their callers share one event."""

    loop: object  # the loop's native token: the asyncio loop, or trio's token
    soon: Soon  # calls into that loop, from the loop
    soon_threadsafe: Soon  # the same, from the writer thread
    now: Callable[[], float]  # that loop's clock (anyio.current_time needs a task)
    done: LoopEvent  # that loop's own event (ADR 0137): set once the commit is known
    writes: list[_Write] = field(default_factory=list)


_STOP = object()


def _group(native: Any) -> _Group:
    """An empty group for the event loop ``native`` (asyncio's loop, or trio's token)."""
    if isinstance(native, asyncio.AbstractEventLoop):
        return _Group(
            native, native.call_soon, native.call_soon_threadsafe, native.time, asyncio.Event()
        )
    import trio

    return _Group(
        native, native.run_sync_soon, native.run_sync_soon, trio.current_time, trio.Event()
    )


def _run_merged(tx: LogTx, batch: list[_Write]) -> None:
    """Run ``batch`` in order; a run of neighbouring writes of one kind that has ``many`` (a
    ``Mergeable``) goes to it at once, in a few multi-row statements instead of a few each."""
    index = 0
    while index < len(batch):
        op = batch[index].op
        many = getattr(op, "many", None)
        if many is None:
            batch[index].result = op(tx)
            index += 1
            continue
        end = index + 1
        while end < len(batch) and type(batch[end].op) is type(op):
            end += 1
        run = batch[index:end]
        results = many(tx, [write.op for write in run])
        for write, result in zip(run, results, strict=True):
            write.result = result
        index = end


class Mergeable(Protocol[T]):
    """A write that can be run alone (``op(tx)``, the careful path) or with its neighbours of
    the same class (``type(op).many(tx, ops)``, one result each, in order)."""

    def __call__(self, tx: LogTx) -> T: ...

    @staticmethod
    def many(tx: LogTx, ops: Sequence[Any]) -> list[T]: ...


class LogWriter:
    """Commits one handle's writes on a thread of its own; ``await writer.submit(op)``.

    ``on_commit(tx, now)`` runs on the loop after each commit, before any caller of it resumes
    (``tx`` is ``None`` when the commit failed; ``now`` is the loop's clock: it runs as a
    callback, outside any task); ``after_wake()`` runs after the callers resumed: at once if
    they queued no write, else on the loop once the thread is about to ``COMMIT`` their next
    writes (or failed to), so it runs while the thread syncs the file.
    """

    def __init__(
        self,
        conn: sqlite3.Connection,
        *,
        channel: str,
        clock: Callable[[], float],
        on_commit: Callable[[LogTx | None, float], None],
        after_wake: Callable[[], None],
    ) -> None:
        self._conn = conn
        self.channel = channel
        self._clock = clock
        self._on_commit = on_commit
        self._after_wake = after_wake
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._gathering: dict[object, _Group] = {}
        self._closed = False
        # the loops that put their readers' wake off until the next COMMIT (appended on the
        # loop, taken on the thread: a deque's append and popleft are atomic)
        self._deferred_wakes: deque[Soon] = deque()
        self.commits = 0
        self._thread = threading.Thread(target=self._run, name="bridge-log-writer", daemon=True)
        self._thread.start()

    async def submit(self, op: Callable[[LogTx], T]) -> T:
        if self._closed:
            raise LogUnavailable("the conversation log is closed")
        try:
            native: object = asyncio.get_running_loop()  # what anyio's token holds, cheaper
        except RuntimeError:
            native = anyio.lowlevel.current_token().native_token  # trio
        group = self._gathering.get(native)
        if group is None:
            group = self._gathering[native] = _group(native)
            group.soon(partial(self._hand_over, native))
        write = _Write(op)
        group.writes.append(write)
        # the commit happens whether or not this caller still waits for it (as it did when
        # the first waiting caller committed for everyone, shielded)
        await group.done.wait()
        if write.error is not None:
            raise write.error
        result: T = write.result
        return result

    def _hand_over(self, key: object) -> None:
        group = self._gathering.pop(key, None)
        if group is not None:
            self._queue.put(group)

    async def aclose(self) -> None:
        """Commit what is queued, then close the connection and end the thread."""
        if self._closed:
            return
        self._closed = True
        for key in list(self._gathering):
            self._hand_over(key)
        self._queue.put(_STOP)
        await anyio.to_thread.run_sync(self._thread.join)

    # ------------------------------------------------------------------ the writer thread

    def _run(self) -> None:
        try:
            while True:
                first = self._queue.get()
                if first is _STOP:
                    return
                groups: list[_Group] = [first]
                stopping = False
                while True:
                    try:
                        more = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if more is _STOP:
                        stopping = True
                        break
                    groups.append(more)
                writes = [write for group in groups for write in group.writes]
                try:
                    tx = self._commit(writes)
                    self._wake_deferred()
                except Exception as error:  # e.g. a ROLLBACK that failed: never strand a caller
                    self._wake_deferred()
                    tx = None
                    for write in writes:
                        write.result = None
                        write.error = LogUnavailable(f"conversation log commit failed: {error}")
                by_loop: dict[int, list[_Group]] = {}
                for group in groups:
                    by_loop.setdefault(id(group.loop), []).append(group)
                for same in by_loop.values():
                    try:
                        same[0].soon_threadsafe(partial(self._committed, tx, same))
                    except RuntimeError:
                        pass  # that event loop has ended: nobody waits for these writes
                if stopping:
                    return
        finally:
            self._conn.close()

    def _committed(self, tx: LogTx | None, groups: list[_Group]) -> None:
        """On the loop: account for the commit, resume its callers, then ``after_wake``."""
        self._on_commit(tx, groups[0].now())
        for group in groups:
            group.done.set()
        groups[0].soon(partial(self._wake_or_defer, groups[0]))

    def _wake_or_defer(self, group: _Group) -> None:
        """On the loop, after the callers resumed: when their next writes are about to go to
        the thread, the readers are woken by that commit just before its ``COMMIT`` (they fold
        while it syncs, not while it needs the interpreter); otherwise now."""
        if group.loop in self._gathering and not self._closed:
            self._deferred_wakes.append(group.soon_threadsafe)
        else:
            self._after_wake()

    def _wake_deferred(self) -> None:
        """On the thread: hand the readers' wakes the loops put off back to them."""
        deferred = self._deferred_wakes
        while deferred:
            soon = deferred.popleft()
            try:
                soon(self._after_wake)
            except RuntimeError:
                pass  # that event loop has ended

    def _commit(self, batch: list[_Write]) -> LogTx | None:
        """Commit ``batch`` in one transaction; returns the transaction's account, or ``None``
        when the commit itself failed (every write then fails with ``LogUnavailable``)."""
        conn = self._conn
        tx = LogTx(conn, self.channel, self._clock)
        tx.defer_counts = True
        try:
            # fast path: no savepoints; an op that fails sends the batch the careful way
            conn.execute("BEGIN IMMEDIATE")
            _run_merged(tx, batch)
            tx.flush_counts()
            self._wake_deferred()  # the readers fold while COMMIT syncs the file
            conn.execute("COMMIT")
            self.commits += 1
            return tx
        except Exception:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
        return self._commit_carefully(batch)

    def _commit_carefully(self, batch: list[_Write]) -> LogTx | None:
        """One savepoint per write, so a failing write does not undo the others."""
        conn = self._conn
        tx = LogTx(conn, self.channel, self._clock)
        try:
            conn.execute("BEGIN IMMEDIATE")
            for index, item in enumerate(batch):
                conn.execute(f"SAVEPOINT w{index}")
                created = len(tx.created)
                try:
                    item.result = item.op(tx)
                except Exception as error:
                    conn.execute(f"ROLLBACK TO w{index}")
                    tx.rolled_back()
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
