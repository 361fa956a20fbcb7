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
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache, partial
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


@lru_cache(maxsize=8)
def _count_sql(column: str) -> str:
    """Add to one of the channel's counters (the same text each time, not built per commit)."""
    return (
        f"INSERT INTO log_counters (channel, {column}) VALUES (?, ?) "
        f"ON CONFLICT (channel) DO UPDATE SET {column} = {column} + excluded.{column}"
    )


@lru_cache(maxsize=64)
def _insert_many_sql(names: tuple[str, ...], rows: int) -> str:
    """``INSERT`` of ``rows`` records: channel and kind bound once (``?1``, ``?2``), then each
    row's seq, inserted_at and ``names``; the same text for the same shape, so SQLite's
    statement cache finds it without the text being built again."""
    width = 2 + len(names)
    tuples = (
        "(?1, ?2, " + ", ".join(f"?{3 + row * width + i}" for i in range(width)) + ")"
        for row in range(rows)
    )
    columns = ", ".join(("channel", "kind", "seq", "inserted_at", *names))
    return f"INSERT INTO log_records ({columns}) VALUES " + ", ".join(tuples)


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

    def wall(self) -> float:
        """The log's wall clock now (not held monotonic: ``now`` is)."""
        return self._clock()

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

        Each row is stamped as ``insert`` stamps it (the clock read for it, never less than
        the row before). Seqs are given, not left to AUTOINCREMENT: one above the largest the
        table ever held (``sqlite_sequence``, which SQLite raises to a given seq too), in row
        order, which is what AUTOINCREMENT would give rows inserted one by one under this
        transaction's write lock. The transaction's first ``now()`` read that seq with the
        channel's last record (under the lock nobody else appends), so most transactions
        spend no statement on it.
        """
        stamps = self._stamps(len(rows))  # the first of a transaction loads _next_seq
        first = self._next_seq
        if first is None:
            first = self.conn.execute("SELECT " + _NEXT_SEQ).fetchone()[0]
        self._next_seq = first + len(rows)
        stamped = list(zip(range(first, first + len(rows)), stamps, strict=True))
        for start in range(0, len(rows), _ROWS_PER_STATEMENT):
            end = min(start + _ROWS_PER_STATEMENT, len(rows))
            values: list[Any] = [self.channel, kind]  # ?1 and ?2 of every row
            for index in range(start, end):
                values += stamped[index]
                values += rows[index]
            self.conn.execute(_insert_many_sql(names, end - start), values)
        return stamped

    def _stamps(self, n: int) -> list[float]:
        """``n`` stamps, one clock read each, as ``n`` calls of ``now()`` give them."""
        last = self.now()
        clock, out = self._clock, [last]
        for _ in range(n - 1):
            now = clock()
            if now > last:
                last = now
            out.append(last)
        self._last = last
        return out

    def count(self, column: str, n: int = 1) -> None:
        if self.defer_counts:
            self.counts[column] = self.counts.get(column, 0) + n
        else:
            self._add(column, n)

    def flush_counts(self) -> None:
        for column, n in self.counts.items():
            self._add(column, n)
        self.counts.clear()

    def _add(self, column: str, n: int) -> None:
        self.conn.execute(_count_sql(column), (self.channel, n))


@dataclass(eq=False, slots=True)
class _Write:
    op: Callable[[LogTx], Any]
    # asyncio: the caller's own future, resolved on the loop with the result (ADR 0178); its
    # own, not one shared by the group, so cancelling one caller cancels nobody else's wait
    waiter: asyncio.Future[Any] | None = None
    result: Any = None
    error: BaseException | None = None


@dataclass(eq=False, slots=True)
class _Group:
    """The writes one event loop queued in one of its turns."""

    loop: object  # the loop's native token: the asyncio loop, or trio's token
    soon: Soon  # calls into that loop, from the loop
    soon_threadsafe: Soon  # the same, from the writer thread
    now: Callable[[], float]  # that loop's clock (anyio.current_time needs a task)
    # trio: the callers share the loop's own event, set once the commit is known (asyncio:
    # each write's waiter instead)
    done: LoopEvent | None
    writes: list[_Write] = field(default_factory=list)


_STOP = object()


def _group(native: Any) -> _Group:
    """An empty group for the event loop ``native`` (asyncio's loop, or trio's token)."""
    if isinstance(native, asyncio.AbstractEventLoop):
        return _Group(native, native.call_soon, native.call_soon_threadsafe, native.time, None)
    import trio

    return _Group(
        native, native.run_sync_soon, native.run_sync_soon, trio.current_time, trio.Event()
    )


def _resolve(groups: list[_Group]) -> None:
    """On the loop: every caller of ``groups`` gets its write's result or error."""
    for group in groups:
        if group.done is not None:
            group.done.set()
            continue
        for write in group.writes:
            waiter = write.waiter
            if waiter is None or waiter.done():
                continue  # its caller was cancelled: the write committed all the same
            if write.error is None:
                waiter.set_result(write.result)
            else:
                waiter.set_exception(write.error)


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

    def submit(self, op: Callable[[LogTx], T]) -> Awaitable[T]:
        """Queue ``op``; await what this returns for its result, once its commit is known.

        The commit happens whether or not the caller still waits for it (as it did when the
        first waiting caller committed for everyone, shielded). On asyncio the awaitable is
        the write's own future, so a write costs no coroutine of its own (ADR 0178).
        """
        if self._closed:
            raise LogUnavailable("the conversation log is closed")
        try:
            loop = asyncio.get_running_loop()  # what anyio's token holds, cheaper
        except RuntimeError:
            return self._submit_trio(op)
        waiter: asyncio.Future[T] = loop.create_future()
        self._gathered(loop).writes.append(_Write(op, waiter))
        return waiter

    async def _submit_trio(self, op: Callable[[LogTx], T]) -> T:
        native = anyio.lowlevel.current_token().native_token
        group = self._gathered(native)
        write = _Write(op)
        group.writes.append(write)
        assert group.done is not None  # a trio group's callers share its event
        await group.done.wait()
        if write.error is not None:
            raise write.error
        result: T = write.result
        return result

    def _gathered(self, native: object) -> _Group:
        """The group gathering this loop's writes; a new one is handed over a loop turn later."""
        group = self._gathering.get(native)
        if group is None:
            group = self._gathering[native] = _group(native)
            group.soon(partial(self._hand_over, native))
        return group

    def _hand_over(self, key: object) -> None:
        """Give the thread the writes ``key``'s loop gathered, if any."""
        group = self._gathering.pop(key, None)
        if group is not None and group.writes:
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
                while not self._queue.empty():  # nobody else takes from it
                    more = self._queue.get_nowait()
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
        """On the loop: account for the commit, resume its callers, then hand their next
        writes over and ``after_wake``."""
        self._on_commit(tx, groups[0].now())
        _resolve(groups)
        key = groups[0].loop
        if key not in self._gathering and not self._closed:
            # the callers' next writes gather here: no hand-over of their own is scheduled,
            # _after_callers hands them over as soon as the callers ran (ADR 0178)
            self._gathering[key] = _group(key)
        groups[0].soon(partial(self._after_callers, groups[0]))

    def _after_callers(self, group: _Group) -> None:
        """On the loop, once the commit's callers resumed (their next writes gathered): those
        writes go to the thread now, and the readers are woken by that commit just before its
        ``COMMIT`` (they fold while it syncs, not while it needs the interpreter); when no
        write follows, the readers are woken now."""
        following = self._gathering.pop(group.loop, None)
        if following is None or not following.writes:
            self._after_wake()
            return
        # noted before the hand-over, so the thread finds the note when it commits them
        self._deferred_wakes.append(group.soon_threadsafe)
        self._queue.put(following)

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
