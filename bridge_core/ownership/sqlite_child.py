"""The SQLite conversation log's writer process: ``main([PATH, CHANNEL, PARENT_PID])``, in a
Python of its own (ADR 0189).

Started by ``LogWriterProcess`` (``sqlite_log_process``), which talks to it in frames
(``bridge_core.child_pipe``). It opens ``PATH`` as the writer thread's connection is opened and
commits ``CHANNEL``'s writes (``sqlite_ops``) with the thread's own group commit
(``sqlite_commit.commit_writes``): everything that came in one read is one transaction.

Frames in: a list of writes (ops). The child numbers nothing: it answers writes in the order
they came, and a batch is always the next writes in line, so the parent matches answers by
counting. Frames out: ``(READY,)`` once the file is open, or ``(FAILED, message)`` if it cannot
be; then per batch ``(DONE, n, outcomes, account)``: one ``(result, error)`` a write, and the
transaction's ``(pruned, prev_seq, loaded, created)``, or ``None`` when the commit failed.

The child ends when its input does (the handle closes it), and on Linux at once when the thread
that started it ends: a killed gateway's writer commits nothing after it.
"""

from __future__ import annotations

import os
import pickle
import signal
import sqlite3
import time
from typing import Any

from bridge_core.child_pipe import die_with_the_parent, send, take_frames
from bridge_core.ownership.sqlite_commit import Write, commit_writes
from bridge_core.ownership.sqlite_schema import open_writer

__all__ = ["DONE", "FAILED", "READY", "main"]

READY, FAILED, DONE = range(3)
_MAX_BATCH = 1000  # writes a transaction


def _outcome(write: Write) -> tuple[Any, BaseException | None]:
    error = write.error
    if error is None:
        return write.result, None
    try:
        pickle.dumps(error)
        return None, error
    except Exception:  # an error that cannot cross: its words do
        return None, RuntimeError(f"{type(error).__name__}: {error}")


def _nothing() -> None:
    """No reader of this process folds during the ``COMMIT``: the parent's do, on their own."""


def serve(conn: sqlite3.Connection, channel: str) -> None:
    pending = bytearray()
    ops: list[Any] = []
    while True:
        chunk = os.read(0, 1 << 20)
        if not chunk:
            break
        pending += chunk
        for frame in take_frames(pending):
            ops += frame
        while ops:  # everything that came in one read is one batch, up to the cap
            batch = [Write(op) for op in ops[:_MAX_BATCH]]
            del ops[:_MAX_BATCH]
            tx = commit_writes(conn, channel, time.time, batch, committing=_nothing)
            account = None if tx is None else (tx.pruned, tx.prev_seq, tx.loaded, tx.created)
            send((DONE, len(batch), [_outcome(write) for write in batch], account))
    conn.close()


def main(argv: list[str]) -> int:
    path, channel, parent = argv
    # Ctrl-C reaches the terminal's whole process group, and a service manager's stop every
    # process of the service: the gateway then stops gracefully, and needs its writer until
    # it has. The child ends with its input instead.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    die_with_the_parent(int(parent))
    try:
        conn = open_writer(path)
    except Exception as error:
        send((FAILED, f"{type(error).__name__}: {error}"))
        return 1
    send((READY,))
    try:
        serve(conn, channel)
    except BrokenPipeError:  # the parent is gone: nobody waits for an answer
        return 0
    return 0
