"""A writer in a process of its own for one SQLite conversation log handle (ADR 0189).

``LogWriterProcess`` commits the handle's writes in a child (``sqlite_child``), which has a GIL
of its own. The writer thread needs the GIL between its statements, so beside the event loop
that admits turns and folds them for the members, the two took turns (ADR 0137 made the
members fold while the thread syncs the file; the statements still waited for the loop, and
the loop for them). With the child, the members fold one commit while the child writes the
next.

A write is no less durable: its caller resumes only once the child's ``COMMIT`` of it returned
(``synchronous=FULL``, as the thread). The writes gathered in one turn of the event loop go to
the child in one frame; the child commits what it read in one transaction, with the thread's
own code (``commit_writes``), a failing write alone sent the careful way.

Asyncio only: off asyncio (trio), and from another event loop than the one that started the
child, ``submit`` returns ``None`` and the handle's thread takes the write. A child that ends
(killed, or it could not write) fails every write in flight and every later one with
``LogUnavailable``, which says to restart. It ends when its input does, after its batch: when
the handle closes, and when the gateway is killed (on Linux at once, with the thread that
started it). A batch it committed but could not answer is what a kill after a ``COMMIT`` is with
the thread: the turns are in the log, and the members of the next start answer them.
"""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import anyio

from bridge_core.child_pipe import PIPE_SIZE, frame, spawn, take_frames
from bridge_core.conversation import LogRecord
from bridge_core.ownership.log import LogUnavailable
from bridge_core.ownership.sqlite_child import DONE, FAILED, READY

__all__ = ["Committed", "LogWriterChoice", "LogWriterProcess"]

T = TypeVar("T")

LogWriterChoice = Literal["auto", "thread", "process"]
"""Where a SQLite log handle runs its commits: its own thread, a process of its own, or
``"auto"``: the process, else (it cannot start) the thread, with a warning."""

_RUN_CHILD = (
    "import sys; from bridge_core.ownership.sqlite_child import main; sys.exit(main(sys.argv[1:]))"
)
_START_TIMEOUT = 60.0  # seconds for the child to import and open the file
_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Committed:
    """A commit's account, as ``LogTx`` gives it to the handle (``on_commit``)."""

    pruned: bool
    prev_seq: int
    loaded: bool
    created: list[LogRecord]


class LogWriterProcess:
    """Commits one SQLite log handle's writes in a child process (see the module).

    ``on_commit(account, now)`` runs on the loop after each commit, before its callers resume;
    ``after_wake()`` once they ran and their next writes went to the child.
    """

    def __init__(
        self,
        path: str,
        *,
        channel: str,
        on_commit: Callable[[Committed, float], None],
        after_wake: Callable[[], None],
        fall_back: bool,
    ) -> None:
        self.path = path
        self.channel = channel
        self._on_commit = on_commit
        self._after_wake = after_wake
        self._fall_back = fall_back  # "auto": a child that cannot start leaves it to the thread
        self._loop: asyncio.AbstractEventLoop | None = None
        self._child: subprocess.Popen[bytes] | None = None
        self._out = self._in = -1
        self._ops: list[Any] = []  # gathered for the next frame ...
        self._gathering: list[asyncio.Future[Any]] = []  # ... and who waits for each
        self._scheduled = False
        self._in_flight: list[asyncio.Future[Any]] = []
        self._outbox = bytearray()
        self._writing = False
        self._received = bytearray()
        self._ready: asyncio.Future[None] | None = None
        self._drained: asyncio.Future[None] | None = None
        self._broken: LogUnavailable | None = None
        self.commits = 0

    @property
    def pid(self) -> int | None:
        """The child's process id, while it runs (``None`` off asyncio, or fallen back)."""
        return None if self._child is None else self._child.pid

    async def start(self) -> None:
        """Start the child on this event loop (nothing off asyncio: the thread writes)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        # ``-c``, not ``-m``: the package imports ``sqlite_child`` before ``-m`` would run it
        command = [sys.executable, "-c", _RUN_CHILD, self.path, self.channel, str(os.getpid())]
        # On the event loop's thread, not a worker's: the child is killed when the thread that
        # started it ends (``child_pipe``), and a worker thread ends when idle.
        try:
            child = spawn(command)
        except OSError as error:  # no such interpreter, no new process allowed, not POSIX
            return self._not_started(error)
        assert child.stdin is not None and child.stdout is not None
        self._child, self._loop = child, loop
        self._out, self._in = child.stdin.fileno(), child.stdout.fileno()
        self._ready = loop.create_future()
        loop.add_reader(self._in, self._readable)
        try:
            with anyio.fail_after(_START_TIMEOUT):
                await self._ready
        except BaseException as error:
            self._fail(LogUnavailable(f"the SQLite log writer for {self.path} did not start"))
            await self._reap()
            if not isinstance(error, LogUnavailable | TimeoutError):
                raise
            self._not_started(error)

    def _not_started(self, error: BaseException) -> None:
        failed = LogUnavailable(
            f"the SQLite log writer process for {self.path} did not start: {error}; "
            f"check that {sys.executable} can import bridge_core"
        )
        if not self._fall_back:
            raise failed from error
        _log.warning("%s; the writer thread takes every write instead", failed)
        self._child = self._loop = self._broken = None

    # ------------------------------------------------------------------ writes

    def submit(self, op: Callable[..., T]) -> asyncio.Future[T] | None:
        """Queue ``op`` for the child; await the future for its result once its commit is
        known. ``None`` when the caller is not on the child's event loop (the thread takes
        it)."""
        loop = self._loop
        if loop is None:
            return None
        try:
            if asyncio.get_running_loop() is not loop:
                return None
        except RuntimeError:
            return None
        if self._broken is not None:
            raise self._broken
        future: asyncio.Future[T] = loop.create_future()
        self._ops.append(op)
        self._gathering.append(future)
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._hand_over)
        return future

    def _hand_over(self) -> None:
        self._scheduled = False
        ops, self._ops = self._ops, []
        futures, self._gathering = self._gathering, []
        if not ops or self._broken is not None:
            return
        try:
            data = frame(ops)
        except Exception:  # one write cannot cross: it fails alone, the rest go
            ops, futures = self._picklable(ops, futures)
            if not ops:
                return
            data = frame(ops)
        self._in_flight += futures
        self._outbox += data
        self._write()

    @staticmethod
    def _picklable(
        ops: list[Any], futures: list[asyncio.Future[Any]]
    ) -> tuple[list[Any], list[asyncio.Future[Any]]]:
        kept: tuple[list[Any], list[asyncio.Future[Any]]] = ([], [])
        for op, future in zip(ops, futures, strict=True):
            try:
                pickle.dumps(op, protocol=pickle.HIGHEST_PROTOCOL)
            except Exception as error:
                if not future.done():
                    future.set_exception(
                        LogUnavailable(f"a log write could not be sent to its writer: {error!r}")
                    )
                continue
            kept[0].append(op)
            kept[1].append(future)
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
            data = os.read(self._in, PIPE_SIZE)
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
            if message[0] == DONE:
                self._done(message[1], message[2], message[3])
            elif message[0] == READY:
                if self._ready is not None and not self._ready.done():
                    self._ready.set_result(None)
            elif message[0] == FAILED:
                opening = f"cannot open the conversation log {self.path}: {message[1]}"
                self._fail(LogUnavailable(opening))

    def _done(
        self,
        count: int,
        outcomes: list[tuple[Any, BaseException | None]],
        account: tuple[bool, int, bool, list[LogRecord]] | None,
    ) -> None:
        futures = self._in_flight[:count]
        del self._in_flight[:count]
        assert self._loop is not None
        if account is not None:
            self.commits += 1
            self._on_commit(Committed(*account), self._loop.time())
        for future, (result, error) in zip(futures, outcomes, strict=True):
            if future.done():
                continue  # its caller was cancelled: the write committed all the same
            if error is None:
                future.set_result(result)
            else:
                future.set_exception(error)
        # after the callers ran (their next writes gathered): those go now, then the readers
        # fold this commit while the child writes the next
        self._loop.call_soon(self._after_callers)
        if not self._in_flight and self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    def _after_callers(self) -> None:
        if self._ops and self._broken is None:
            self._hand_over()
        self._after_wake()

    def _ended(self, how: str) -> LogUnavailable:
        code = None if self._child is None else self._child.poll()
        exit_note = "" if code is None else f", exit status {code}"
        return LogUnavailable(
            f"the SQLite log writer process for {self.path} is gone: {how}{exit_note}; the "
            "writes it had not confirmed may or may not be in the log, and this handle takes "
            "no more: restart the gateway (its members answer what the log holds)"
        )

    def _fail(self, error: LogUnavailable) -> None:
        """The child is gone or unusable: every write made, answered with ``error``, and every
        later one refused with it."""
        if self._broken is None:
            self._broken = error
        waiting = [*self._in_flight, *self._gathering]
        self._in_flight, self._gathering, self._ops = [], [], []
        for future in waiting:
            if not future.done():
                future.set_exception(error)
                future.exception()  # its caller reads it, if still there; no warning
        if self._loop is not None and self._in >= 0:
            self._loop.remove_reader(self._in)
            if self._writing:
                self._writing = False
                self._loop.remove_writer(self._out)
        for waiter in (self._ready, self._drained):
            if waiter is not None and not waiter.done():
                waiter.set_exception(error)
                waiter.exception()  # read here: nobody else may wait for it

    # ------------------------------------------------------------------ stop

    async def aclose(self) -> None:
        """Commit the writes already made, then end the child."""
        if self._child is None:
            return
        if self._broken is None:
            self._hand_over()
            if self._in_flight:
                assert self._loop is not None
                self._drained = self._loop.create_future()
                try:
                    await self._drained
                except LogUnavailable:
                    pass  # the child is gone: the writes in flight have its error
        if self._broken is None:
            self._fail(LogUnavailable("the conversation log is closed"))
        await self._reap()

    async def _reap(self) -> None:
        child, self._child = self._child, None
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
