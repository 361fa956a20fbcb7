"""One writer thread per SQLite file that turns concurrent calls into group commits.

Every call is a function of the connection. The writer takes whatever calls are queued (up to
``max_batch``), runs them in one ``BEGIN IMMEDIATE`` transaction, each inside its own savepoint
(so one failing call does not undo the others), commits once, then wakes each caller's event
loop once per batch. With ``synchronous=FULL`` a commit costs an fsync; concurrent callers share
it, so throughput does not pay one fsync per reply.
"""

from __future__ import annotations

import queue
import sqlite3
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import anyio
import anyio.lowlevel

__all__ = ["SQLiteWriter"]

T = TypeVar("T")


class _Call(Generic[T]):
    __slots__ = ("done", "error", "fn", "result", "token")

    def __init__(self, fn: Callable[[sqlite3.Connection], T]) -> None:
        self.fn = fn
        self.done = anyio.Event()
        self.token = anyio.lowlevel.current_token()
        self.result: T | None = None
        self.error: BaseException | None = None


_STOP = object()


def _wake(calls: list[_Call[Any]]) -> None:
    for call in calls:
        call.done.set()


def _schedule_wake(token: anyio.lowlevel.EventLoopToken, calls: list[_Call[Any]]) -> None:
    """Wake the calls' event loop without blocking the writer (asyncio or trio)."""
    native: Any = token.native_token
    try:
        if hasattr(native, "call_soon_threadsafe"):
            native.call_soon_threadsafe(_wake, calls)
        else:
            native.run_sync_soon(_wake, calls)
    except RuntimeError:
        pass  # that event loop has ended; nobody waits for these results any more


class SQLiteWriter:
    """Owns one connection to ``path`` on a thread of its own; ``await writer.call(fn)``."""

    def __init__(
        self,
        path: str,
        *,
        setup: Callable[[sqlite3.Connection], None],
        max_batch: int = 1000,
        name: str = "bridge-sqlite-writer",
    ) -> None:
        self.path = path
        self._setup = setup
        self._max_batch = max_batch
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._opened = threading.Event()
        self._open_error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.batches = 0
        self.calls = 0

    async def start(self) -> None:
        self._thread.start()
        await anyio.to_thread.run_sync(self._opened.wait)
        if self._open_error is not None:
            raise self._open_error

    async def call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if not self._thread.is_alive():
            raise RuntimeError(f"the SQLite writer for {self.path} is not running")
        pending: _Call[T] = _Call(fn)
        self._queue.put(pending)
        await pending.done.wait()
        if pending.error is not None:
            raise pending.error
        return pending.result  # type: ignore[return-value]

    async def stop(self) -> None:
        if self._thread.is_alive():
            self._queue.put(_STOP)
            await anyio.to_thread.run_sync(self._thread.join)

    def _run(self) -> None:
        try:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            self._setup(conn)
        except BaseException as error:
            self._open_error = error
            self._opened.set()
            return
        self._opened.set()
        try:
            while True:
                first = self._queue.get()
                if first is _STOP:
                    return
                batch: list[_Call[Any]] = [first]
                stopping = False
                while len(batch) < self._max_batch:
                    try:
                        item = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if item is _STOP:
                        stopping = True
                        break
                    batch.append(item)
                self._run_batch(conn, batch)
                if stopping:
                    return
        finally:
            conn.close()

    def _run_batch(self, conn: sqlite3.Connection, batch: list[_Call[Any]]) -> None:
        try:
            conn.execute("BEGIN IMMEDIATE")
            for call in batch:
                conn.execute("SAVEPOINT call")
                try:
                    call.result = call.fn(conn)
                except Exception as error:
                    conn.execute("ROLLBACK TO call")
                    call.error = error
                conn.execute("RELEASE call")
            conn.execute("COMMIT")
        except Exception as error:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            for call in batch:
                call.error = error
                call.result = None
        self.batches += 1
        self.calls += len(batch)
        by_loop: dict[int, tuple[anyio.lowlevel.EventLoopToken, list[_Call[Any]]]] = {}
        for call in batch:
            key = id(call.token.native_token)
            by_loop.setdefault(key, (call.token, []))[1].append(call)
        for token, calls in by_loop.values():
            _schedule_wake(token, calls)
