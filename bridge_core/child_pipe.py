"""Frames over a child process's standard input and output: how the SQLite writers that run in
a process of their own talk to it (the ledger's, ADR 0186; the conversation log's, ADR 0189).

A frame is four bytes of length (little-endian), then a pickle. The parent starts the child
with ``spawn`` (its ends of the pipes non-blocking, for its event loop), sends ``frame(...)``
bytes and reads answers with ``take_frames``; the child writes with ``send`` and asks to end
with its parent (``die_with_the_parent``).
"""

from __future__ import annotations

import ctypes
import os
import pickle
import signal
import struct
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

if sys.platform != "win32":  # the pipes are POSIX pipes
    import fcntl

__all__ = ["HEADER", "PIPE_SIZE", "die_with_the_parent", "frame", "send", "spawn", "take_frames"]

HEADER = struct.Struct("<I")
PIPE_SIZE = 1 << 20  # Linux's default pipe-max-size: a frame seldom waits for room
_PR_SET_PDEATHSIG = 1  # prctl's option (linux/prctl.h)


def frame(message: Any) -> bytes:
    """``message`` as one frame's bytes."""
    body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return HEADER.pack(len(body)) + body


def take_frames(pending: bytearray) -> Iterator[Any]:
    """Each whole frame at the start of ``pending``, unpickled, taken out of it as it goes; a
    frame not yet whole stays for the next read."""
    while len(pending) >= HEADER.size:
        (size,) = HEADER.unpack_from(pending)
        if len(pending) < HEADER.size + size:
            return
        message = pickle.loads(pending[HEADER.size : HEADER.size + size])
        del pending[: HEADER.size + size]
        yield message


def send(message: Any) -> None:
    """In the child: write ``message`` as one frame to standard output, all of it."""
    view = memoryview(frame(message))
    while view:
        view = view[os.write(1, view) :]


def spawn(command: list[str]) -> subprocess.Popen[bytes]:
    """Start ``command`` with pipes for its input and output, the parent's ends large and
    non-blocking. Raises ``OSError`` when it cannot start (no such interpreter, no process
    allowed) and on a system without POSIX pipes."""
    if sys.platform == "win32":
        raise OSError("its pipes need a POSIX system")
    child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdin is not None and child.stdout is not None
    for fd in (child.stdin.fileno(), child.stdout.fileno()):
        try:
            fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_SIZE)
        except OSError:  # a lower pipe-max-size: frames wait for room, in the event loop
            pass
        os.set_blocking(fd, False)
    return child


def die_with_the_parent(parent: int) -> None:
    """In the child: ask Linux to kill this process when the thread that started it ends. The
    parent starts it from the event loop's thread, so a killed gateway takes its writer with
    it, as it takes a writer thread, instead of leaving a batch to commit after the kill.
    Elsewhere, or if refused, the end of the input still ends the child, after its batch."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # it ended before the request was made
        os._exit(0)
