"""Who this process is, and whether the process that stamped a row on this host still runs.

An owner is ``host|pid|start`` where start is the boot id and the process's start time in clock
ticks (``/proc/<pid>/stat`` field 22), so a recycled pid or a reboot never passes for the
process that stamped a row. A zombie (killed, not yet reaped) is dead.
"""

from __future__ import annotations

import os
import socket
from functools import cache

from bridge_core.ledger.model import Owner

__all__ = ["current_owner", "is_alive_here", "process_start"]


@cache
def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as file:
            return file.read().strip()[:8]
    except OSError:
        return "noboot"


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as file:
            text = file.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its last ')'.
    return text[text.rfind(")") + 2 :].split()


def process_start(pid: int) -> str | None:
    """``boot:ticks`` for a running process, ``None`` when it does not run (or is a zombie)."""
    fields = _stat_fields(pid)
    if fields is None:
        if os.path.isdir("/proc/self"):
            return None
        try:  # no procfs: fall back on the pid alone
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return "noproc"
    if fields[0] in ("Z", "X"):
        return None
    return f"{_boot_id()}:{fields[19]}"


def current_owner() -> Owner:
    pid = os.getpid()
    return Owner(host=socket.gethostname(), pid=pid, started=process_start(pid) or "unknown")


def is_alive_here(owner_id: str, *, me: Owner | None = None) -> bool:
    """Whether the owner ``owner_id`` is a live process on this host.

    Another host's owner counts as dead: a SQLite ledger belongs to one host (use PostgreSQL,
    with leases, to share a ledger between hosts).
    """
    try:
        owner = Owner.parse(owner_id)
    except ValueError:
        return False
    here = me if me is not None else current_owner()
    if owner.host != here.host:
        return False
    return process_start(owner.pid) == owner.started
