"""One writer thread per SQLite file that turns concurrent calls into group commits.

A call is a function of the connection (``call``), or an item for a ``Merged`` kind of call
(``call_merged``): the writer hands every queued item of one kind to that kind's ``run_many``
at once, which does them in a few multi-row statements instead of one statement each (each
statement costs a trip through sqlite3 and a chance to lose the GIL to the event loop). The
writer takes whatever is queued (up to ``max_batch``), runs it in one ``BEGIN IMMEDIATE``
transaction (a call that raises is dropped and the others run again, so one failing call does
not undo the others; a merged group that raises is run again item by item to find the one),
commits once, then wakes each caller's event loop once per batch. With ``synchronous=FULL`` a
commit costs an fsync; concurrent callers share it, so throughput does not pay one fsync per
reply.

A call made with ``durable=False`` (a settle: its loss on a power cut is a labelled resend,
ADR 0143) needs its commit to survive a process kill, not a power cut. A batch of nothing but
such calls commits at ``synchronous=NORMAL``: the WAL frames are written (in the OS's cache,
which outlives the process) but not fsynced, and the next ``FULL`` commit's fsync of the WAL
makes them durable with its own. A batch with any durable call commits at ``FULL`` as before.

Calls queued together are concurrent (none of their callers has seen another's result), so the
writer may run them in any order: merged kinds run grouped, in the order each kind first
appeared.
"""

from __future__ import annotations

import asyncio
import queue
import sqlite3
import threading
from collections.abc import Callable, Sequence
from typing import Any, Generic, Protocol, TypeVar

import anyio
import anyio.lowlevel

__all__ = ["BatchCall", "Merged", "SQLiteWriter", "commit_batch"]

T = TypeVar("T")
I_contra = TypeVar("I_contra", contravariant=True)
R_co = TypeVar("R_co", covariant=True)


class Merged(Protocol[I_contra, R_co]):
    """A kind of call the writer runs many at once: ``run_many(conn, items)`` returns one result
    per item, in order, inside the writer's transaction."""

    def run_many(self, conn: sqlite3.Connection, items: Sequence[I_contra]) -> Sequence[R_co]: ...


class _Call(Generic[T]):
    """One queued call. On asyncio the caller awaits a plain future (the cheap path the gateway
    runs on); elsewhere (trio) an anyio event woken through the loop's token."""

    __slots__ = (
        "begun",
        "committing",
        "done",
        "durable",
        "error",
        "fn",
        "future",
        "item",
        "kind",
        "loop",
        "many",
        "result",
        "then",
        "token",
    )

    def __init__(
        self,
        fn: Callable[[sqlite3.Connection], T] | None,
        kind: Merged[Any, Any] | None = None,
        item: object = None,
        *,
        many: bool = False,
        durable: bool = True,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self.fn = fn
        self.kind = kind
        self.item = item
        self.many = many  # ``item`` is a list of items; the result, a list of their results
        self.durable = durable  # its commit must survive a power cut (``synchronous=FULL``)
        # called on the caller's loop when its batch begins (``call_merged_many``)
        self.begun: Callable[[], None] | None = None
        # called on the caller's loop when its batch's COMMIT begins (``queue_merged``)
        self.committing: Callable[[], None] | None = None
        # called on the caller's loop once the batch committed, with the future's result set
        self.then: Callable[[], None] | None = None
        self.result: T | None = None
        self.error: BaseException | None = None
        self.future: asyncio.Future[None] | None = None
        self.done: anyio.Event | None = None
        self.token: anyio.lowlevel.EventLoopToken | None = None
        if loop is None:  # ``loop``: the running loop, when the caller already looked it up
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                loop = None
        self.loop: asyncio.AbstractEventLoop | None = loop
        if self.loop is not None:
            self.future = self.loop.create_future()
        else:
            self.done = anyio.Event()
            self.token = anyio.lowlevel.current_token()

    async def wait(self) -> None:
        if self.future is not None:
            await self.future
        else:
            assert self.done is not None
            await self.done.wait()

    def outcome(self) -> T:
        """The result once the call's batch committed (its error, raised, if it failed)."""
        if self.error is not None:
            raise self.error
        return self.result  # type: ignore[return-value]


_STOP = object()


def _wake(calls: list[_Call[Any]]) -> None:
    for call in calls:
        if call.future is not None:
            if not call.future.done():  # a cancelled caller no longer waits
                call.future.set_result(None)
            if call.then is not None:  # here, not a done callback: one loop iteration sooner
                call.then()
        elif call.done is not None:
            call.done.set()


def _schedule_wake(calls: list[_Call[Any]]) -> None:
    """Wake the calls' event loop once, without blocking the writer (asyncio or trio)."""
    _call_soon(calls[0], _wake, calls)


def _call_soon(call: _Call[Any], fn: Callable[..., object], *args: object) -> None:
    """Run ``fn(*args)`` on ``call``'s event loop (asyncio or trio), from the writer's thread."""
    try:
        if call.loop is not None:
            call.loop.call_soon_threadsafe(fn, *args)
        else:
            assert call.token is not None
            native: Any = call.token.native_token
            native.run_sync_soon(fn, *args)
    except RuntimeError:
        pass  # that event loop has ended; nobody waits for this any more


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
        self._running = False
        # asyncio callers' calls wait here until the end of the event loop's iteration, then go
        # to the writer as one list: every task that resumed in that iteration (e.g. a whole
        # group commit's callers) lands in one batch, instead of the writer waking on the
        # first call of a burst and committing it alone.
        self._gathering: dict[asyncio.AbstractEventLoop, list[_Call[Any]]] = {}
        self._synchronous = "FULL"  # the connection's setting now (``setup`` leaves it FULL)
        self.batches = 0
        self.calls = 0
        self.unsynced = 0  # batches committed at ``synchronous=NORMAL`` (no durable call)

    async def start(self) -> None:
        self._thread.start()
        await anyio.to_thread.run_sync(self._opened.wait)
        if self._open_error is not None:
            raise self._open_error
        self._running = True

    async def caught_up(self) -> None:
        """Nothing to wait for: one thread runs every call in the order it came (see
        ``SQLiteWriterProcess.caught_up``)."""

    async def call(self, fn: Callable[[sqlite3.Connection], T], *, durable: bool = True) -> T:
        """Run ``fn(conn)`` in the writer's next transaction; returns after its commit.
        ``durable=False``: that commit need only survive a process kill (see the module)."""
        return await self._submit(_Call(fn, durable=durable))

    async def call_merged(
        self, kind: Merged[I_contra, T], item: I_contra, *, durable: bool = True
    ) -> T:
        """Queue ``item`` for ``kind.run_many``; returns its result (``durable``: as ``call``)."""
        # ``_submit`` inlined: this is awaited once or twice a reply, and every coroutine
        # between the caller and the future is one more frame to create, and to resume and
        # unwind when the writer's batch wakes it.
        pending: _Call[T] = _Call(None, kind, item, durable=durable)
        self._enqueue(pending)
        if pending.future is not None:
            await pending.future
        else:
            await pending.wait()
        if pending.error is not None:
            raise pending.error
        return pending.result  # type: ignore[return-value]

    async def call_merged_many(
        self,
        kind: Merged[I_contra, T],
        items: Sequence[I_contra],
        *,
        durable: bool = True,
        begun: Callable[[], None] | None = None,
        committing: Callable[[], None] | None = None,
    ) -> list[T]:
        """Queue ``items`` for ``kind.run_many`` as one call (one wake-up for all of them, in the
        same statements as other callers' items of that kind); returns their results in order
        (``durable``: as ``call``).

        Two hints for a caller with Python to run beside the batch (ADR 0180), neither saying
        anything of the outcome: ``begun`` is called on the caller's event loop (asyncio or
        trio) once the writer holds the call's batch, before its ``BEGIN``; ``committing`` (on
        asyncio only, as ``queue_merged``'s) as the batch's ``COMMIT`` begins, whose fsync runs
        without the GIL. With no items, ``begun`` is called at once and nothing queued."""
        if not items:
            if begun is not None:
                begun()
            return []
        call: _Call[list[T]] = _Call(None, kind, list(items), many=True, durable=durable)
        call.begun = begun
        call.committing = committing
        return await self._submit(call)

    def queue_merged(
        self,
        kind: Merged[I_contra, T],
        item: I_contra,
        *,
        durable: bool = True,
        committing: Callable[[], None] | None = None,
        then: Callable[[], None] | None = None,
    ) -> _Call[T] | None:
        """Queue ``item`` for ``kind.run_many`` now and return the call without waiting (ADR
        0164). On the caller's event loop, ``committing`` is called as the batch's ``COMMIT``
        begins (a hint that the outcome is an fsync away; it says nothing of the outcome), and
        ``then`` once the batch committed, when ``outcome()`` is the result. ``None``, and
        nothing queued, off asyncio."""
        pending: _Call[T] = _Call(None, kind, item, durable=durable)
        if pending.future is None:
            return None
        pending.committing = committing
        pending.then = then
        self._enqueue(pending)
        return pending

    async def _submit(self, pending: _Call[T]) -> T:
        self._enqueue(pending)
        await pending.wait()
        if pending.error is not None:
            raise pending.error
        return pending.result  # type: ignore[return-value]

    def _enqueue(self, pending: _Call[Any]) -> None:
        if not self._running:  # a flag, not Thread.is_alive(): that takes a lock every call
            raise RuntimeError(f"the SQLite writer for {self.path} is not running")
        loop = pending.loop
        if loop is None:
            self._queue.put(pending)
        else:
            gathering = self._gathering.get(loop)
            if gathering is None:
                self._gathering[loop] = gathering = []
                loop.call_soon(self._hand_over, loop)
            gathering.append(pending)

    def _hand_over(self, loop: asyncio.AbstractEventLoop) -> None:
        self._queue.put(self._gathering.pop(loop))

    async def stop(self) -> None:
        self._running = False
        for loop in list(self._gathering):  # calls already made still run, before the stop
            self._hand_over(loop)
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
                batch: list[_Call[Any]] = first if isinstance(first, list) else [first]
                stopping = False
                while len(batch) < self._max_batch:
                    try:
                        item = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if item is _STOP:
                        stopping = True
                        break
                    if isinstance(item, list):
                        batch += item
                    else:
                        batch.append(item)
                self._run_batch(conn, batch)
                if stopping:
                    return
                if self._synchronous == "NORMAL" and self._queue.empty():
                    self._rest_at_full(conn)
        finally:
            conn.close()

    def _run_batch(self, conn: sqlite3.Connection, batch: list[_Call[Any]]) -> None:
        _signal_begun(batch)
        commit_batch(conn, batch, set_level=self._set_synchronous, committing=_signal_committing)
        self.batches += 1
        self.calls += len(batch)
        self.unsynced += self._synchronous == "NORMAL"
        loop = batch[0].loop
        if loop is not None and all(call.loop is loop for call in batch):
            _schedule_wake(batch)  # the usual case, one event loop: no grouping a call
            return
        by_loop: dict[int, list[_Call[Any]]] = {}
        for call in batch:
            owner: object = call.loop if call.loop is not None else call.token
            if call.token is not None:
                owner = call.token.native_token
            by_loop.setdefault(id(owner), []).append(call)
        for calls in by_loop.values():
            _schedule_wake(calls)

    def _rest_at_full(self, conn: sqlite3.Connection) -> None:
        """Back to FULL while nothing waits, after a batch of settles committed at NORMAL: the
        next durable batch (a record, a claim: a message waits for it) then finds the level set
        instead of setting it (45-80 us a time on this machine). Every batch still sets its
        own level before its BEGIN, so this changes no batch's durability."""
        try:
            conn.execute("PRAGMA synchronous = FULL")
        except Exception:  # the next durable batch sets it, and fails if it cannot
            return
        self._synchronous = "FULL"

    def _set_synchronous(self, conn: sqlite3.Connection, level: str) -> None:
        """Set ``synchronous`` for the next transaction (SQLite refuses it inside one). In WAL
        mode FULL differs from NORMAL only by the fsync of the WAL at each commit; both sync
        the WAL's header when it is reused and around checkpoints, so neither risks the file."""
        if level != self._synchronous:
            try:
                conn.execute(f"PRAGMA synchronous = {level}")
            except Exception:  # unlikely; FULL stays the setting when it cannot be lowered
                if level == "FULL":
                    raise
                return
            self._synchronous = level


class BatchCall(Protocol):
    """What ``commit_batch`` reads and sets of a call (``_Call`` here, the writer process's own
    in ``sqlchild``): a function of the connection (``fn``) or a ``kind``'s ``item``."""

    fn: Callable[[sqlite3.Connection], Any] | None
    kind: Merged[Any, Any] | None
    item: Any
    many: bool
    durable: bool
    result: Any
    error: BaseException | None


C = TypeVar("C", bound=BatchCall)


def commit_batch(
    conn: sqlite3.Connection,
    batch: Sequence[C],
    *,
    set_level: Callable[[sqlite3.Connection, str], None],
    committing: Callable[[list[C]], None],
) -> None:
    """Run ``batch`` in one ``BEGIN IMMEDIATE`` transaction and commit it, at ``FULL`` when any
    call is durable (``set_level(conn, level)`` before the ``BEGIN``), calling ``committing``
    just before the ``COMMIT``; each call's ``result`` or ``error`` is set.

    No savepoint per call (two more statements each): when a call raises, the transaction is
    rolled back and the batch runs again without it. Calls are functions of the connection
    only, so running one again is safe; errors are rare (bugs, a full disk)."""
    calls = list(batch)
    units = _units(calls)
    level = "FULL" if any(call.durable for call in calls) else "NORMAL"
    while units:
        failed: list[C] | None = None
        try:
            set_level(conn, level)
            conn.execute("BEGIN IMMEDIATE")
            for unit in units:
                try:
                    _run_unit(conn, unit)
                except Exception as error:
                    if len(unit) == 1:
                        unit[0].error = error
                    failed = unit
                    break
            if failed is None:
                committing(calls)
                conn.execute("COMMIT")
                break
            conn.execute("ROLLBACK")
            # A merged group that raised runs again item by item, to find the one.
            rest = [other for other in units if other is not failed]
            units = rest if len(failed) == 1 else rest + [[call] for call in failed]
        except Exception as error:  # BEGIN, COMMIT or the PRAGMA failed: none kept
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            for unit in units:
                for call in unit:
                    call.error = error
                    call.result = None
            break


def _signal_begun(batch: list[_Call[Any]]) -> None:
    """Tell the callers that asked (``call_merged_many``) that the writer holds their batch:
    from here the batch needs the GIL only between its statements (ADR 0180)."""
    for call in batch:
        begun = call.begun
        if begun is not None:
            call.begun = None  # once, even if the batch runs again after a failed call
            _call_soon(call, begun)


def _signal_committing(batch: list[_Call[Any]]) -> None:
    """Tell the callers that asked (``queue_merged``, ``call_merged_many``) that their COMMIT
    begins: while its fsync runs, without the GIL, their loop can make ready what waits for
    the outcome (ADR 0164, 0180). Asyncio callers only, as documented there."""
    for call in batch:
        committing = call.committing
        if committing is not None and call.loop is not None:
            call.committing = None  # once, even if the batch runs again after a failed call
            _call_soon(call, committing)


def _units(batch: list[C]) -> list[list[C]]:
    """Plain calls one by one; merged calls grouped by kind, where the kind first appeared."""
    units: list[list[C]] = []
    groups: dict[int, list[C]] = {}
    for call in batch:
        if call.kind is None:
            units.append([call])
            continue
        group = groups.get(id(call.kind))
        if group is None:
            group = groups[id(call.kind)] = []
            units.append(group)
        group.append(call)
    return units


def _run_unit(conn: sqlite3.Connection, unit: Sequence[BatchCall]) -> None:
    first = unit[0]
    if first.kind is None:
        assert first.fn is not None
        first.result = first.fn(conn)
        return
    items: list[Any] = []
    many = False
    for call in unit:
        if call.many:
            items += call.item
            many = True
        else:
            items.append(call.item)
    results = first.kind.run_many(conn, items)
    if len(results) != len(items):
        raise RuntimeError(f"{first.kind!r} returned {len(results)} results for {len(items)} items")
    if not many:  # one result each
        for call, result in zip(unit, results, strict=True):
            call.result = result
        return
    at = 0
    for call in unit:
        if call.many:
            count = len(call.item)
            call.result = list(results[at : at + count])
            at += count
        else:
            call.result = results[at]
            at += 1
