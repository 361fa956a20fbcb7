"""A second connection to a SQLite ledger file, for the sweeps' page reads, off the writer thread.

A sweep's read of a page (500 rows) was about a quarter of the writer thread's work in a boot
sweep, and the writer is the sweep's bottleneck: every claim and settle of the sweep waits
behind it. In WAL mode a reader never blocks the writer nor waits for it, and sees the last
commit; a sweep claims each row by a compare-and-swap on the fence it read, so a page read a
moment before a concurrent commit is as safe as one read inside it (ADR 0136).

One connection, used by one worker thread at a time (anyio's thread pool, a capacity of one):
opening it, each read and closing it never block the event loop.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import TypeVar

import anyio
import anyio.to_thread

__all__ = ["SQLiteReader"]

T = TypeVar("T")


class SQLiteReader:
    """``await reader.call(fn)`` runs ``fn(connection)`` on a worker thread."""

    def __init__(self, path: str, *, setup: Callable[[sqlite3.Connection], None]) -> None:
        self.path = path
        self._setup = setup
        self._conn: sqlite3.Connection | None = None
        self._limiter = anyio.CapacityLimiter(1)
        self._closed = False

    async def call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return await anyio.to_thread.run_sync(self._run, fn, limiter=self._limiter)

    def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._closed:
            raise RuntimeError(f"the SQLite reader for {self.path} is closed")
        if self._conn is None:  # opened at its first read, on a worker thread
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            try:
                self._setup(conn)
            except BaseException:
                conn.close()
                raise
            self._conn = conn
        return fn(self._conn)

    async def aclose(self) -> None:
        await anyio.to_thread.run_sync(self._close, limiter=self._limiter)

    def _close(self) -> None:
        self._closed = True
        if self._conn is not None:
            self._conn.close()
            self._conn = None
