"""The SQLite ledger's writer process: ``main([PATH, OWNER, PARENT_PID])``, in a Python of
its own.

Started by ``SQLiteWriterProcess`` (``sqlprocess``), which talks to it over its standard input
and output in frames: four bytes of length (little-endian), then a pickle. It opens ``PATH`` as
the writer thread does and runs the ledger's merged statements (``sqlmerged``) for the store
whose owner is ``OWNER``, in group commits, with the same rules (``sqlwriter.commit_batch``).

Frames in: a list of calls, each ``(kind, durable, item, many, wants)``: ``kind`` one of
``KINDS``, ``wants`` a bit mask of the signals the call asked for (``WANTS_BEGUN``,
``WANTS_COMMITTING``).
The child numbers nothing: it answers calls in the order they came, and a batch is always the
next calls in line, so the parent matches answers by counting.

Frames out: ``(READY,)`` once the file is open, or ``(FAILED, message)`` if it cannot be; then,
per batch, ``(BEGUN, n)`` before its ``BEGIN`` and ``(COMMITTING, n)`` before its ``COMMIT``
when one of its ``n`` calls asked, and ``(DONE, n, outcomes, synced)``: one ``(result, error)``
a call, and whether the batch committed at ``FULL``.
A record whose row went in as sent comes back as its ``created`` flag alone, not the row.

The child ends when its input does (the store closes it), and on Linux at once when the thread
that started it ends (``PR_SET_PDEATHSIG``: a killed gateway's writer does not commit after
it); elsewhere a killed gateway's child ends at the end of its input, after its batch.
"""

from __future__ import annotations

import ctypes
import os
import pickle
import select
import signal
import sqlite3
import struct
import sys
from collections.abc import Callable, Iterator
from typing import Any

from bridge_core.ledger.liveness import Liveness
from bridge_core.ledger.owner import current_owner
from bridge_core.ledger.sqlmerged import (
    MergedClaims,
    MergedDelivered,
    MergedHeldUpdates,
    MergedRecords,
)
from bridge_core.ledger.sqlschema import setup_connection
from bridge_core.ledger.sqlwriter import Merged, commit_batch

__all__ = [
    "BEGUN",
    "COMMITTING",
    "DONE",
    "FAILED",
    "HEADER",
    "KINDS",
    "READY",
    "WANTS_BEGUN",
    "WANTS_COMMITTING",
    "main",
    "take_frames",
]

HEADER = struct.Struct("<I")
READY, FAILED, BEGUN, COMMITTING, DONE = range(5)
WANTS_BEGUN, WANTS_COMMITTING = 1, 2  # a call's ``wants``
KINDS = ("records", "claims", "held", "delivered")
_PR_SET_PDEATHSIG = 1  # prctl's option (linux/prctl.h)
_MAX_BATCH = 1000  # calls a transaction, as the writer thread's ``max_batch``


class _ChildCall:
    """A call as ``commit_batch`` runs it."""

    __slots__ = ("durable", "error", "fn", "item", "kind", "many", "name", "result", "wants")

    def __init__(self, kind: Merged[Any, Any], name: str, durable: bool, item: Any, many: bool):
        self.fn: Callable[[sqlite3.Connection], Any] | None = None
        self.kind: Merged[Any, Any] | None = kind
        self.name = name
        self.durable = durable
        self.item = item
        self.many = many
        self.wants = 0
        self.result: Any = None
        self.error: BaseException | None = None


def take_frames(pending: bytearray) -> Iterator[Any]:
    """Each whole frame at the start of ``pending``, unpickled, taken out of it as it goes; a
    frame not yet whole stays for the next read."""
    while len(pending) >= HEADER.size:
        (size,) = HEADER.unpack_from(pending)
        if len(pending) < HEADER.size + size:
            return
        frame = pickle.loads(pending[HEADER.size : HEADER.size + size])
        del pending[: HEADER.size + size]
        yield frame


def _send(message: tuple[Any, ...]) -> None:
    body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(HEADER.pack(len(body)) + body)
    while view:
        view = view[os.write(1, view) :]


def _outcome(call: _ChildCall) -> tuple[Any, Any]:
    if call.error is not None:
        try:
            pickle.dumps(call.error)
            return None, call.error
        except Exception:  # an error that cannot cross: its words do
            return None, RuntimeError(f"{type(call.error).__name__}: {call.error}")
    result = call.result
    if call.name == "records" and not call.many and result[0] is call.item:
        return result[1], None  # the row as sent: the parent has it
    return result, None


class _Child:
    def __init__(self, path: str, owner: str) -> None:
        self.liveness = Liveness(owner, me=current_owner())  # this host (its own pid: unused)
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        setup_connection(self.conn)
        self.conn.create_function("owner_alive", 1, self.liveness.alive, deterministic=False)
        self.level = "FULL"  # ``setup_connection`` leaves it FULL
        liveness = self.liveness
        self.kinds: dict[str, Merged[Any, Any]] = {
            "records": MergedRecords(owner),
            "claims": MergedClaims(owner, liveness.forget_live, lambda: liveness.dead_json),
            "held": MergedHeldUpdates(owner),
            "delivered": MergedDelivered(owner),
        }

    def set_level(self, conn: sqlite3.Connection, level: str) -> None:
        # as ``SQLiteWriter._set_synchronous``: a PRAGMA only when the level changes
        if level != self.level:
            try:
                conn.execute(f"PRAGMA synchronous = {level}")
            except Exception:
                if level == "FULL":
                    raise
                return
            self.level = level

    def run(self, calls: list[_ChildCall]) -> None:
        wanted = 0
        for call in calls:
            wanted |= call.wants
        if wanted & WANTS_BEGUN:
            _send((BEGUN, len(calls)))

        def committing(_: list[_ChildCall]) -> None:
            if wanted & WANTS_COMMITTING:
                _send((COMMITTING, len(calls)))

        commit_batch(self.conn, calls, set_level=self.set_level, committing=committing)
        _send((DONE, len(calls), [_outcome(call) for call in calls], self.level == "FULL"))

    def serve(self) -> None:
        pending = bytearray()
        calls: list[_ChildCall] = []
        while True:
            chunk = os.read(0, 1 << 20)
            if not chunk:
                break
            pending += chunk
            for frame in take_frames(pending):
                for name, durable, item, many, wants in frame:
                    call = _ChildCall(self.kinds[name], name, durable, item, many)
                    call.wants = wants
                    calls.append(call)
            while calls:  # everything that came in one read is one batch, up to the cap
                batch, calls = calls[:_MAX_BATCH], calls[_MAX_BATCH:]
                self.run(batch)
            if self.level != "FULL" and not pending and not select.select([0], [], [], 0)[0]:
                # idle after settles at NORMAL: back to FULL now, so the next record (a message
                # waits for it) finds it set, as the writer thread does (ADR 0164)
                self.set_level(self.conn, "FULL")
        self.conn.close()


def _die_with_the_parent(parent: int) -> None:
    """Ask Linux to kill this process when the thread that started it ends: the store starts
    it from the event loop's thread, so a killed gateway takes its writer with it, as it takes
    its writer thread, instead of leaving a batch to commit after the kill (a claim committed
    then is a reply labelled as a possible duplicate though never sent). Elsewhere, or if
    refused, the end of the input still ends the child, after its batch."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # it ended before the request was made
        os._exit(0)


def main(argv: list[str]) -> int:
    path, owner, parent = argv
    # Ctrl-C reaches the terminal's whole process group, and a service manager's stop
    # (systemd's control group) every process of the service: the gateway then stops
    # gracefully, and needs its writer until it has. The child ends with its input instead.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _die_with_the_parent(int(parent))
    try:
        child = _Child(path, owner)
    except Exception as error:
        _send((FAILED, f"{type(error).__name__}: {error}"))
        return 1
    _send((READY,))
    try:
        child.serve()
    except BrokenPipeError:  # the parent is gone: nobody waits for an answer
        return 0
    return 0
