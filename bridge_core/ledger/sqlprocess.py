"""A writer in a process of its own for the SQLite ledger's hot statements (ADR 0186).

``SQLiteWriterProcess`` has the merged half of ``SQLiteWriter``'s interface (``call_merged``,
``call_merged_many``, ``queue_merged``, the same hints) and runs those calls in a child,
running ``bridge_core.ledger.sqlchild.main``, which has a GIL of its own. The writer thread needs
the GIL between its statements, and beside a busy event loop it waits for it, so the loop and
the thread took turns (ADR 0179). Calls go to the child at the end of the loop's iteration, as
to the thread, and also every ``chunk`` calls before it: the child starts on the first calls of
a wave of replies while the loop makes the rest.

A reply is no less durable: a call's future is set only once the child's ``COMMIT`` of it has
returned, at ``FULL`` unless every call of the batch asked for less (``durable=False``), exactly
as the thread decides. Functions of the connection (``SQLiteWriter.call``) stay with the
thread: they cannot cross a pipe. Both write the same file, and SQLite's lock orders them
(``busy_timeout``); calls queued together are concurrent, so either order is one of theirs.

Asyncio only: off asyncio (trio), and from an event loop other than the one that started the
child, each call goes to the thread writer. A child that ends (killed, or it could not write)
fails every call in flight and every later one with ``LedgerError``, which says to restart. A
child ends when its input does, after the batch it is running: when the store closes, and when
the gateway is killed and its end of the pipe closes. A batch it committed but could not answer
is what a kill after a commit is with the thread: recorded or claimed, never sent, resent by
the next start's sweep, labelled as a possible duplicate when it was claimed.
"""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
import subprocess
import sys
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from itertools import islice
from threading import get_ident
from typing import Any, TypeVar

import anyio

if sys.platform != "win32":  # the child's pipes are POSIX pipes (``start``)
    import fcntl

from bridge_core.ledger.model import LedgerError, LedgerWriter
from bridge_core.ledger.sqlchild import (
    BEGUN,
    COMMITTING,
    DONE,
    FAILED,
    HEADER,
    KINDS,
    READY,
    take_frames,
)
from bridge_core.ledger.sqlwriter import Merged, SQLiteWriter, _Call, _wake

__all__ = ["CHUNK", "SQLiteWriterProcess", "hot_writer"]

T = TypeVar("T")
I = TypeVar("I")  # noqa: E741 (an item)

CHUNK = 64
"""Calls gathered before they go to the child without waiting for the loop's iteration to end
(ADR 0186: at 64, a wave of 512 replies overlapped with the child's work)."""

_PIPE_SIZE = 1 << 20  # Linux's default pipe-max-size: a frame seldom waits for room
_RUN_CHILD = (
    "import sys; from bridge_core.ledger.sqlchild import main; sys.exit(main(sys.argv[1:]))"
)
_START_TIMEOUT = 60.0  # seconds for the child to import and open the file
_log = logging.getLogger(__name__)


def hot_writer(
    writer: LedgerWriter, path: str, *, owner: str, thread: SQLiteWriter, kinds: Sequence[object]
) -> SQLiteWriter | SQLiteWriterProcess:
    """The writer of a store's merged statements for ``writer``: ``thread`` itself, or a
    process whose calls ``thread`` takes where the child cannot (``"auto"`` falls back to it
    when the child does not start). ``kinds``: the store's merged kinds, in ``KINDS``'s order."""
    if writer == "thread":
        return thread
    if writer not in ("process", "auto"):
        raise ValueError(f"writer must be 'auto', 'thread' or 'process', not {writer!r}")
    names = {id(kind): name for kind, name in zip(kinds, KINDS, strict=True)}
    fall_back = writer == "auto"
    return SQLiteWriterProcess(path, owner=owner, kinds=names, thread=thread, fall_back=fall_back)


class SQLiteWriterProcess:
    """Runs the merged calls of one SQLite file's store in a child process; ``thread`` takes
    the calls the child cannot (see the module). ``kinds`` names each merged kind the store
    uses, as ``sqlchild.KINDS`` does."""

    def __init__(
        self,
        path: str,
        *,
        owner: str,
        kinds: dict[int, str],
        thread: SQLiteWriter,
        chunk: int = CHUNK,
        fall_back: bool = False,
    ) -> None:
        self.path = path
        self._owner = owner
        self._kinds = kinds  # id(kind) -> its name in the child
        self._thread = thread
        self._chunk = chunk
        self._fall_back = fall_back  # a child that cannot start leaves every call to the thread
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0  # the thread the loop ran on when it started the child
        self._child: subprocess.Popen[bytes] | None = None
        self._out = self._in = -1
        # Calls gathered for the next frame: what goes down the pipe (``_wire``), and what
        # waits here for each answer (``_gathering``): a ``_Call`` (hints, ``then``, many
        # items), or for a plain ``call_merged`` only ``(future, row)``, ``row`` the record's
        # item (its answer may be its ``created`` flag alone): half the loop's work a call.
        self._wire: list[tuple[str, bool, Any, bool, int]] = []
        self._gathering: list[_Call[Any] | tuple[asyncio.Future[Any], Any]] = []
        self._scheduled = False
        self._in_flight: deque[_Call[Any] | tuple[asyncio.Future[Any], Any]] = deque()
        self._outbox = bytearray()
        self._writing = False
        self._received = bytearray()
        self._ready: asyncio.Future[None] | None = None
        self._drained: asyncio.Future[None] | None = None
        self._handed = self._answered = 0  # calls sent to the child, and answered by it
        self._catching_up: list[tuple[int, asyncio.Future[None]]] = []
        self._broken: LedgerError | None = None
        self.batches = 0
        self.calls = 0
        self.unsynced = 0  # batches committed at ``synchronous=NORMAL`` (no durable call)

    @property
    def pid(self) -> int | None:
        """The child's process id, once started (``None`` off asyncio)."""
        return None if self._child is None else self._child.pid

    async def start(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # not asyncio: the thread writer takes every call
        if sys.platform == "win32":
            return self._not_started(OSError("its pipes need a POSIX system"))
        # ``-c``, not ``-m``: the package imports ``sqlchild`` (its constants) before ``-m``
        # would run it, and runpy warns of that
        command = [sys.executable, "-c", _RUN_CHILD, self.path, self._owner, str(os.getpid())]
        # On the event loop's thread, not a worker's: the child asks to be killed when the
        # thread that started it ends (``sqlchild``), and a worker thread ends when idle. The
        # fork and exec hold the loop for a few milliseconds, once, as the store opens.
        try:
            child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # noqa: ASYNC220
        except OSError as error:  # no such interpreter, or no new process allowed
            return self._not_started(error)
        assert child.stdin is not None and child.stdout is not None
        self._child, self._loop, self._loop_thread = child, loop, get_ident()
        self._out, self._in = child.stdin.fileno(), child.stdout.fileno()
        for fd in (self._out, self._in):
            try:
                fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, _PIPE_SIZE)
            except OSError:  # a lower pipe-max-size: frames wait for room, in the event loop
                pass
            os.set_blocking(fd, False)
        self._ready = loop.create_future()
        loop.add_reader(self._in, self._readable)
        try:
            with anyio.fail_after(_START_TIMEOUT):
                await self._ready
        except BaseException as error:
            self._fail(LedgerError(f"the SQLite writer process for {self.path} did not start"))
            await self._reap()
            if not isinstance(error, LedgerError | TimeoutError):
                raise
            self._not_started(error)

    def _not_started(self, error: BaseException) -> None:
        """The child could not start: ``LedgerError``, or with ``fall_back`` ("auto", ADR 0187)
        a warning, and every call goes to the thread (a frozen build, a sandbox: the ledger
        still opens, at the thread's throughput)."""
        failed = LedgerError(
            f"the SQLite writer process for {self.path} did not start: {error}; "
            f"check that {sys.executable} can import bridge_core"
        )
        if not self._fall_back:
            raise failed from error
        _log.warning("%s; the writer thread takes every write instead", failed)
        self._child = self._loop = self._broken = None

    # ------------------------------------------------------------------ calls

    def call_merged(self, kind: Merged[I, T], item: I, *, durable: bool = True) -> Awaitable[T]:
        """As ``SQLiteWriter.call_merged``: what it returns is awaited for the result.

        Not a coroutine: the future the answer sets is returned itself, so a caller's await
        reaches it with no frame of ours in between, to create, suspend and resume, on each of
        the two or three calls a reply makes."""
        loop = self._here()
        if loop is None:
            return self._thread.call_merged(kind, item, durable=durable)
        if self._broken is not None:
            raise self._broken
        name = self._kinds[id(kind)]
        future: asyncio.Future[T] = loop.create_future()
        self._add((name, durable, item, False, 0), (future, item if name == "records" else None))
        return future

    async def call_merged_many(
        self,
        kind: Merged[I, T],
        items: Sequence[I],
        *,
        durable: bool = True,
        begun: Callable[[], None] | None = None,
        committing: Callable[[], None] | None = None,
    ) -> list[T]:
        """As ``SQLiteWriter.call_merged_many``, hints included."""
        loop = self._here()
        if loop is None:
            return await self._thread.call_merged_many(
                kind, items, durable=durable, begun=begun, committing=committing
            )
        if not items:
            if begun is not None:
                begun()
            return []
        pending: _Call[list[T]] = _Call(
            None, kind, list(items), many=True, durable=durable, loop=loop
        )
        pending.begun = begun
        pending.committing = committing
        self._enqueue(pending)
        assert pending.future is not None
        await pending.future
        if pending.error is not None:
            raise pending.error
        return pending.result  # type: ignore[return-value]

    def queue_merged(
        self,
        kind: Merged[I, T],
        item: I,
        *,
        durable: bool = True,
        committing: Callable[[], None] | None = None,
        then: Callable[[], None] | None = None,
    ) -> _Call[T] | None:
        """As ``SQLiteWriter.queue_merged``."""
        loop = self._here()
        if loop is None:
            return self._thread.queue_merged(
                kind, item, durable=durable, committing=committing, then=then
            )
        pending: _Call[T] = _Call(None, kind, item, durable=durable, loop=loop)
        pending.committing = committing
        pending.then = then
        self._enqueue(pending)
        return pending

    async def caught_up(self) -> None:
        """Return once every call made before this one has its answer (at once if none waits):
        a call of the thread writer's that must come after them awaits this first. Those
        calls' callers may have stopped waiting (cancelled); their calls still commit, and a
        read on the thread's connection must see them, as it would with the thread alone."""
        if self._here() is None:
            return
        if self._gathering:
            self._hand_over()
        if self._answered >= self._handed or self._broken is not None:
            return
        assert self._loop is not None
        waiter = self._loop.create_future()
        self._catching_up.append((self._handed, waiter))
        await waiter

    def _here(self) -> asyncio.AbstractEventLoop | None:
        """The child's event loop when the caller runs on it; otherwise ``None`` (the thread
        takes the call).

        Read as "on the thread that started the child, with that loop running": asyncio runs
        one loop a thread at a time, so no other loop can be running here. Not
        ``asyncio.get_running_loop()``, which on CPython 3.11 makes a ``getpid`` system call
        (it checks for a fork), two or three times a reply."""
        loop = self._loop
        if loop is None or get_ident() != self._loop_thread or not loop.is_running():
            return None
        return loop

    def _enqueue(self, pending: _Call[Any]) -> None:
        if self._broken is not None:
            raise self._broken
        # ``wants``: WANTS_BEGUN (1) and WANTS_COMMITTING (2), as bools shifted
        wants = (pending.begun is not None) | (pending.committing is not None) << 1
        name = self._kinds[id(pending.kind)]
        self._add((name, pending.durable, pending.item, pending.many, wants), pending)

    def _add(
        self,
        wire: tuple[str, bool, Any, bool, int],
        waiting: _Call[Any] | tuple[asyncio.Future[Any], Any],
    ) -> None:
        self._wire.append(wire)
        self._gathering.append(waiting)
        if len(self._gathering) >= self._chunk:
            self._hand_over()
        elif not self._scheduled:
            self._scheduled = True
            assert self._loop is not None
            self._loop.call_soon(self._hand_over)

    def _hand_over(self) -> None:
        self._scheduled = False
        calls, self._gathering = self._gathering, []
        frame, self._wire = self._wire, []
        if not calls or self._broken is not None:
            return
        try:
            body = pickle.dumps(frame, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:  # one call's item cannot cross: it fails alone, the rest go
            frame, calls = self._picklable(frame, calls)
            if not calls:
                return
            body = pickle.dumps(frame, protocol=pickle.HIGHEST_PROTOCOL)
        self._in_flight.extend(calls)
        self._handed += len(calls)
        self._outbox += HEADER.pack(len(body))
        self._outbox += body
        self._write()

    def _picklable(
        self,
        frame: list[tuple[str, bool, Any, bool, int]],
        calls: list[_Call[Any] | tuple[asyncio.Future[Any], Any]],
    ) -> tuple[list[tuple[str, bool, Any, bool, int]], list[Any]]:
        """The calls of ``frame`` whose items pickle; each other one answered with its error."""
        kept: tuple[list[tuple[str, bool, Any, bool, int]], list[Any]] = ([], [])
        refused: list[_Call[Any]] = []
        for wire, waiting in zip(frame, calls, strict=True):
            try:
                pickle.dumps(wire, protocol=pickle.HIGHEST_PROTOCOL)
            except Exception as error:
                refusal = LedgerError(f"a ledger call could not be sent to its writer: {error!r}")
                if isinstance(waiting, tuple):
                    if not waiting[0].done():
                        waiting[0].set_exception(refusal)
                else:
                    waiting.error = refusal
                    refused.append(waiting)
                continue
            kept[0].append(wire)
            kept[1].append(waiting)
        if refused:
            _wake(refused)
        return kept

    def _write(self) -> None:
        try:
            written = os.write(self._out, self._outbox) if self._outbox else 0
        except BlockingIOError:
            written = 0
        except OSError as error:  # the child is gone (EPIPE): its end is read as EOF too
            self._fail(self._ended(f"its input could not be written ({error})"))
            return
        del self._outbox[:written]
        assert self._loop is not None
        if self._outbox and not self._writing:
            self._writing = True
            self._loop.add_writer(self._out, self._write)
        elif not self._outbox and self._writing:
            self._writing = False
            self._loop.remove_writer(self._out)

    # ------------------------------------------------------------------ answers

    def _readable(self) -> None:
        try:
            data = os.read(self._in, _PIPE_SIZE)
        except BlockingIOError:
            return
        except OSError as error:
            self._fail(self._ended(f"its output could not be read ({error})"))
            return
        if not data:
            self._fail(self._ended("it ended"))
            return
        self._received += data
        for message in take_frames(self._received):
            self._answer(message)

    def _answer(self, message: tuple[Any, ...]) -> None:
        what = message[0]
        if what == DONE:
            self._done(message[1], message[2], message[3])
        elif what in (BEGUN, COMMITTING):
            hints = []
            for call in islice(self._in_flight, message[1]):
                if isinstance(call, tuple):  # a plain call: no hints
                    continue
                if what == BEGUN:
                    hint, call.begun = call.begun, None
                else:
                    hint, call.committing = call.committing, None
                if hint is not None:
                    hints.append(hint)
            for hint in hints:  # after the loop: a hint may queue calls (and hand them over)
                hint()
        elif what == READY:
            if self._ready is not None and not self._ready.done():
                self._ready.set_result(None)
        elif what == FAILED:
            self._fail(LedgerError(f"cannot open the ledger file {self.path}: {message[1]}"))

    def _done(
        self, count: int, outcomes: list[tuple[Any, BaseException | None]], synced: bool
    ) -> None:
        popleft = self._in_flight.popleft
        calls: list[_Call[Any]] = []
        for result, error in outcomes:
            waiting = popleft()
            if isinstance(waiting, tuple):  # a plain ``call_merged``
                future, row = waiting
                if future.done():  # its caller stopped waiting
                    continue
                if error is not None:
                    future.set_exception(error)
                elif row is not None and type(result) is bool:
                    future.set_result((row, result))  # the row went in as sent
                else:
                    future.set_result(result)
                continue
            if error is not None:
                waiting.error = error
            elif type(result) is bool and self._kinds[id(waiting.kind)] == "records":
                waiting.result = (waiting.item, result)  # a record queued (``queue_merged``)
            else:
                waiting.result = result
            calls.append(waiting)
        self.batches += 1
        self.calls += count
        self.unsynced += not synced
        self._answered += count
        if calls:
            _wake(calls)
        if self._catching_up:
            self._catch_up(everything=False)
        if not self._in_flight and self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    def _catch_up(self, *, everything: bool) -> None:
        waiting, self._catching_up = self._catching_up, []
        for target, waiter in waiting:
            if everything or target <= self._answered:
                if not waiter.done():
                    waiter.set_result(None)
            else:
                self._catching_up.append((target, waiter))

    def _ended(self, how: str) -> LedgerError:
        code = None if self._child is None else self._child.poll()
        exit_note = "" if code is None else f", exit status {code}"
        return LedgerError(
            f"the SQLite writer process for {self.path} is gone: {how}{exit_note}; nothing it "
            "had not confirmed was sent, and the ledger takes no more replies: restart the "
            "gateway (its next start resends what was recorded)"
        )

    def _fail(self, error: LedgerError) -> None:
        """The child is gone or unusable: every call made, answered with ``error``, and every
        later one refused with it."""
        if self._broken is None:
            self._broken = error
        waiting = [*self._in_flight, *self._gathering]
        self._in_flight.clear()
        self._gathering, self._wire = [], []
        calls: list[_Call[Any]] = []
        for call in waiting:
            if isinstance(call, tuple):
                if not call[0].done():
                    call[0].set_exception(error)
                    call[0].exception()  # its caller reads it, if still there; no warning
                continue
            call.error = error
            call.result = None
            calls.append(call)
        if calls:
            _wake(calls)
        self._catch_up(everything=True)  # every call made is answered (with ``error``)
        self._stop_watching()
        for waiter in (self._ready, self._drained):
            if waiter is not None and not waiter.done():
                waiter.set_exception(error)
                waiter.exception()  # read here: nobody else may wait for it

    def _stop_watching(self) -> None:
        if self._loop is None or self._in < 0:
            return
        self._loop.remove_reader(self._in)
        if self._writing:
            self._writing = False
            self._loop.remove_writer(self._out)

    # ------------------------------------------------------------------ stop

    async def stop(self) -> None:
        """Run the calls already made, then end the child (as ``SQLiteWriter.stop``)."""
        if self._child is None:
            return
        if self._broken is None:
            self._hand_over()
            if self._in_flight:
                assert self._loop is not None
                self._drained = self._loop.create_future()
                try:
                    await self._drained
                except LedgerError:
                    pass  # the child is gone: the calls in flight have its error
        if self._broken is None:
            self._broken = LedgerError(f"the SQLite writer process for {self.path} is stopped")
        self._stop_watching()
        await self._reap()

    async def _reap(self) -> None:
        child = self._child
        if child is None:
            return
        assert child.stdin is not None and child.stdout is not None
        child.stdin.close()  # its input ends: it finishes its batch and exits

        def wait() -> None:
            try:
                child.wait(10)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()

        await anyio.to_thread.run_sync(wait)
        child.stdout.close()
