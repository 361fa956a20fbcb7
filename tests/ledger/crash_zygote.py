"""Start the crash tests' children by forking one pre-imported parent instead of a fresh
interpreter each time.

A fresh ``python crash_child.py`` spends some 0.4 s importing bridge_core, anyio and the stores
before it opens the ledger; the crash runs start a child for every kill (dozens per test), so
the suite spent most of their time importing. Run as a script, this module imports
``crash_child`` once and then forks a child per request read from its standard input: the child
runs ``crash_child.cli`` as ``python crash_child.py ARGS`` would, from its own boot sweep on, a
real process of its own that the harness SIGKILLs, SIGSTOPs and waits for as before. Nothing of
the ledger exists before the fork (the store opens in the child, its writer process, if any,
starts there). The parent reaps each child and reports its exit code.

``ForkedChild`` is the part of ``subprocess.Popen`` the harness uses (``pid``, ``poll``,
``wait``, ``send_signal``, ``kill``, ``communicate``, ``returncode``, ``stderr``).

Protocol: a request is one JSON line ``{"argv": [...], "stderr": path}``; the answers are
``pid N`` (in request order) and, whenever a child ends, ``exit N CODE`` (``Popen``'s
``returncode``: minus the signal number for a signal).
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from queue import Queue
from typing import IO, Any

__all__ = ["ForkedChild", "spawn"]


# ---------------------------------------------------------------------- the parent that forks


def _serve() -> None:  # pragma: no cover - runs in the zygote process
    import selectors

    import crash_child  # noqa: F401 - the imports every child would otherwise make again

    selector = selectors.DefaultSelector()
    selector.register(0, selectors.EVENT_READ, None)
    pending = b""
    while True:
        for key, _ in selector.select():
            if key.data is not None:  # a child ended
                pid = key.data
                selector.unregister(key.fd)
                os.close(key.fd)
                _, status = os.waitpid(pid, 0)
                os.write(1, f"exit {pid} {os.waitstatus_to_exitcode(status)}\n".encode())
                continue
            chunk = os.read(0, 65536)
            if not chunk:
                return  # the harness is gone: the children it left are its own business
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                request = json.loads(line)
                pid = os.fork()
                if pid == 0:
                    for known in list(selector.get_map().values()):
                        if known.data is not None:
                            os.close(known.fd)  # the other children's pidfds
                    selector.close()
                    _become_child(request)  # does not return
                os.write(1, f"pid {pid}\n".encode())
                selector.register(os.pidfd_open(pid), selectors.EVENT_READ, pid)


def _become_child(request: dict[str, Any]) -> None:  # pragma: no cover - in a forked child
    import crash_child

    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)
    err = os.open(request["stderr"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(err, 2)
    os.close(err)
    sys.argv = [str(crash_child.__file__), *request["argv"]]
    # Ends as ``python crash_child.py`` ends: SystemExit unwinds to the interpreter's exit.
    sys.exit(crash_child.cli(request["argv"]))


# ---------------------------------------------------------------------- the harness's side


class _Zygote:
    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, __file__],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=None,
            cwd=Path(__file__).parent,
        )
        self.lock = threading.Lock()  # one request and its pid answer at a time
        self.pids: Queue[int | None] = Queue()
        self.exits: dict[int, int] = {}
        self.ended = threading.Condition()
        threading.Thread(target=self._read, name="crash-zygote", daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            kind, *values = line.decode().split()
            if kind == "pid":
                self.pids.put(int(values[0]))
            elif kind == "exit":
                with self.ended:
                    self.exits[int(values[0])] = int(values[1])
                    self.ended.notify_all()
        self.pids.put(None)  # the zygote died: whoever waits for a pid hears so
        with self.ended:
            self.ended.notify_all()

    def spawn(self, argv: list[str], stderr: Path) -> int:
        assert self.process.stdin is not None
        with self.lock:
            request = json.dumps({"argv": argv, "stderr": str(stderr)}) + "\n"
            self.process.stdin.write(request.encode())
            self.process.stdin.flush()
            pid = self.pids.get(timeout=30)
        if pid is None:
            raise AssertionError(f"the crash zygote ended ({self.process.poll()})")
        return pid

    def stop(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(10)


_zygote: _Zygote | None = None
_zygote_lock = threading.Lock()


def _the_zygote() -> _Zygote:
    global _zygote
    with _zygote_lock:
        if _zygote is None or _zygote.process.poll() is not None:
            _zygote = _Zygote()
            atexit.register(_zygote.stop)
        return _zygote


class ForkedChild:
    """A child forked by the zygote, handled like the ``subprocess.Popen`` of a fresh one."""

    def __init__(self, zygote: _Zygote, argv: list[str], stderr: Path) -> None:
        self._zygote = zygote
        self.args = argv
        stderr.write_bytes(b"")  # the child appends; read from the start
        self.stderr: IO[bytes] | None = stderr.open("rb")
        self.returncode: int | None = None
        self.pid = zygote.spawn(argv, stderr)

    def poll(self) -> int | None:
        if self.returncode is None:
            with self._zygote.ended:
                self.returncode = self._zygote.exits.pop(self.pid, None)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is not None:
            return self.returncode
        with self._zygote.ended:
            done = self._zygote.ended.wait_for(
                lambda: self.pid in self._zygote.exits or self._zygote.process.poll() is not None,
                timeout,
            )
            if not done:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            if self.pid not in self._zygote.exits:
                raise AssertionError(f"the crash zygote ended before pid {self.pid} did")
            self.returncode = self._zygote.exits.pop(self.pid)
        return self.returncode

    def send_signal(self, signal_number: int) -> None:
        if self.poll() is None:  # not reaped: the pid is still this child's
            os.kill(self.pid, signal_number)

    def kill(self) -> None:
        import signal

        self.send_signal(signal.SIGKILL)

    def communicate(self, timeout: float | None = None) -> tuple[bytes, bytes]:
        self.wait(timeout)
        err = b""
        if self.stderr is not None:
            err = self.stderr.read()
            self.stderr.close()
        return b"", err


def spawn(argv: list[str], stderr: Path) -> ForkedChild:
    """A child running ``crash_child.py argv``, forked from the zygote (started on first use)."""
    return ForkedChild(_the_zygote(), argv, stderr)


if __name__ == "__main__":
    _serve()
