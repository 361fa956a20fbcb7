"""A process's children, read from ``/proc``, and waiting for processes to end: for tests that
kill a gateway with SIGKILL and must know its writer process (ADR 0186) has ended too before
they look at what the gateway left. Linux only."""

from __future__ import annotations

import time
from pathlib import Path

__all__ = ["children_of", "running", "wait_ended"]


def _stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # ended (and reaped) meanwhile
        return None
    return text.rsplit(")", 1)[1].split()  # after the name, which may hold spaces


def running(pid: int) -> bool:
    """Whether ``pid`` runs: not ended, nor a zombie (ended, not yet reaped)."""
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z"


def children_of(pid: int) -> list[int]:
    """The processes whose parent is ``pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields is not None and int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def wait_ended(pids: list[int], *, timeout: float = 10.0) -> None:
    """Return once none of ``pids`` runs; ``AssertionError`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while any(running(pid) for pid in pids):
        if time.monotonic() > deadline:
            raise AssertionError(f"processes {[p for p in pids if running(p)]} still run")
        time.sleep(0.005)
