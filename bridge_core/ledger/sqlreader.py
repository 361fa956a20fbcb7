"""A second connection to a SQLite ledger file, for the sweeps' page reads, off the writer thread.

A sweep's read of a page (500 rows) was about a quarter of the writer thread's work in a boot
sweep, and the writer is the sweep's bottleneck: every claim and settle of the sweep waits
behind it. In WAL mode a reader never blocks the writer nor waits for it, and sees the last
commit; a sweep claims each row by a compare-and-swap on the fence it read, so a page read a
moment before a concurrent commit is as safe as one read inside it (ADR 0136).

One connection, used by one worker thread at a time (anyio's thread pool, a capacity of one):
opening it, each read and closing it never block the event loop.

Rows are handed over through a SQL function (``TakenRows``) rather than stepped out: sqlite3
(CPython 3.11) lets go of the GIL around each ``sqlite3_step`` and around reading each
column's type, 21 hand-overs for a ledger row of 19 columns, and the event loop takes the GIL
at each while it sends (ADR 0176). A function's arguments are converted with the GIL held
throughout, once a row.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import anyio
import anyio.to_thread

__all__ = ["SQLiteReader", "TakenRows"]

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


class TakenRows:
    """``take_row``, the SQL function that ``read`` hands rows over through, on the one
    connection it was made for (by that connection's setup; a connection is used by one thread
    at a time). Its rows reach only this object, so ``read`` refuses any other connection: one
    would run its own ``take_row`` (or none) and the read would come back empty."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self._rows: list[tuple[Any, ...]] = []
        conn.create_function("take_row", -1, self._take)

    def _take(self, *row: Any) -> None:
        self._rows.append(row)

    def read(
        self, conn: sqlite3.Connection, columns: str, rest: str, params: Sequence[Any]
    ) -> list[tuple[Any, ...]]:
        """The rows of ``SELECT {columns} {rest}``, each as the tuple of its values, in the
        order the statement gives them: each row's values go to ``take_row``, which the outer
        query calls once a row (an aggregate over a subquery with a ``LIMIT`` is not flattened,
        so it sees the subquery's rows in its order). The values are those ``fetchall`` gives
        (integers, floats, strings, bytes, ``None``), converted by the same sqlite3 code."""
        if conn is not self._conn:
            raise ValueError("TakenRows.read: this connection's take_row is not this object's")
        found: list[tuple[Any, ...]] = []
        self._rows = found
        try:
            conn.execute(
                f"SELECT count(take_row({columns})) FROM (SELECT {columns} {rest})", params
            )
        finally:
            self._rows = []
        return found
