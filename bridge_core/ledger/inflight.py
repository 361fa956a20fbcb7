"""A reply's record queued to its store, its commit not yet awaited (ADR 0164).

The gateway hands a message for an idle channel to the sender while its record commits: the
sender's ``begin()`` for it waits here, and so does the HTTP handler for its 202. Whoever waits,
nothing reads the record's outcome before the commit (and its fsync) returned. The sender's
wait is woken first, so once the commit returns the send goes out before the 202 is written.

asyncio only (the SQLite writer's calls carry an asyncio future there); elsewhere a store
offers no record in flight and the caller records the usual way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from bridge_core.ledger.model import Obligation

__all__ = ["RecordInFlight"]


class RecordInFlight:
    """``fresh`` is the row as the record creates it; ``committed()`` returns ``(row, created)``
    once the commit returned, or raises what failed it. The store binds it to the writer's call
    (``follow``): the writer calls ``at_commit`` on the loop as the record's ``COMMIT`` begins
    and ``ended`` once it returned, when ``finish`` reads the outcome (and does the store's
    bookkeeping), once."""

    __slots__ = ("_at_commit", "_error", "_finish", "_loop", "_outcome", "_waiters", "fresh")

    def __init__(self, fresh: Obligation) -> None:
        self.fresh = fresh
        self._finish: Callable[[], tuple[Obligation, bool]] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._outcome: tuple[Obligation, bool] | None = None
        self._error: BaseException | None = None
        # One future per waiter, never the writer's own: a waiter cancelled (its task stopped)
        # cancels only its future, and the writer's result is still read for the others.
        self._waiters: list[asyncio.Future[None]] | None = []
        self._at_commit: list[asyncio.Future[None]] | None = []

    def follow(
        self, loop: asyncio.AbstractEventLoop, finish: Callable[[], tuple[Obligation, bool]]
    ) -> None:
        self._loop = loop
        self._finish = finish

    @property
    def done(self) -> bool:
        return self._waiters is None

    def at_commit(self) -> None:
        """The writer began the record's ``COMMIT`` (or the record ended)."""
        waiters, self._at_commit = self._at_commit, None
        for waiter in waiters or ():
            if not waiter.done():
                waiter.set_result(None)

    async def committing(self) -> None:
        """Return once the record's ``COMMIT`` began (its outcome is an fsync away) or ended:
        a hint for when to make ready what waits for the outcome. It says nothing of it."""
        if self._at_commit is not None:
            assert self._loop is not None
            waiter = self._loop.create_future()
            self._at_commit.append(waiter)
            await waiter

    def ended(self) -> None:
        assert self._finish is not None
        try:
            self._outcome = self._finish()
        except BaseException as error:  # the commit failed: every waiter gets its error
            self._error = error
        self.at_commit()  # a record that failed before its COMMIT ends the hint too
        waiters, self._waiters = self._waiters, None
        for waiter in waiters or ():
            if not waiter.done():
                waiter.set_result(None)

    async def committed(self, *, first: bool = False) -> tuple[Obligation, bool]:
        """``(row, created)`` once the record's commit returned. ``first``: woken before the
        waiters already there (the sender's ``begin()``, ahead of the handler)."""
        waiters = self._waiters
        if waiters is not None:
            assert self._loop is not None
            waiter = self._loop.create_future()
            if first:
                waiters.insert(0, waiter)
            else:
                waiters.append(waiter)
            await waiter
        if self._error is not None:
            raise self._error
        assert self._outcome is not None
        return self._outcome
