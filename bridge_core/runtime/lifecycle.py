"""Where a gateway is in its one run, and the task group new work starts in while it serves.

A gateway runs once (its channels, stores and sockets are built for that run, as an httpx
client's state refuses a second use)::

    new ── begin() ──► starting ── serve(tasks) ──► serving ── stop() ──► stopping
     └───────────────────┴──────────────── stop() ───────────────────────┘

(a gateway stopped before it runs still runs once: it starts, and stops at once)

New work (an event, a message, an agent's connection) is taken only while serving; starting, the
API answers 503 "starting" (the ledger's boot sweep runs first), and stopping 503 "shutting
down" (``ShuttingDown``), so a client retries elsewhere.
"""

from __future__ import annotations

import enum

import anyio
from anyio.abc import TaskGroup

from bridge_core.runtime.http_api import ApiError, ShuttingDown

__all__ = ["Lifecycle", "Stage"]


class Stage(enum.Enum):
    NEW = "new"
    STARTING = "starting"
    SERVING = "serving"
    STOPPING = "stopping"


class Lifecycle:
    """One gateway's stage; ``stopped`` is set once ``stop()`` was called."""

    def __init__(self) -> None:
        self.stage = Stage.NEW
        self.begun = False  # apart from the stage: stop() before run() makes that run brief
        self.stopped = anyio.Event()
        self._tasks: TaskGroup | None = None  # set while serving, the only stage it is read in

    def begin(self) -> None:
        """Start the one run, or raise ``RuntimeError`` if it was started before."""
        if self.begun:
            raise RuntimeError(
                "this Gateway has already run; build a new Gateway(config) to serve again"
            )
        self.begun = True
        if self.stage is Stage.NEW:
            self.stage = Stage.STARTING

    def serve(self, tasks: TaskGroup) -> None:
        """Take new work from now on, starting what it needs in ``tasks``."""
        if self.stage is Stage.STARTING:
            self.stage = Stage.SERVING
            self._tasks = tasks

    def stop(self) -> None:
        """Take no new work (idempotent)."""
        self.stage = Stage.STOPPING
        self._tasks = None
        self.stopped.set()

    @property
    def accepting(self) -> bool:
        return self.stage is Stage.SERVING

    def tasks_for_new_work(self) -> TaskGroup:
        """The task group to start new work in, or the 503 to answer while not serving."""
        if self.stage is Stage.SERVING and self._tasks is not None:
            return self._tasks
        raise self.refusal()

    def refusal(self) -> ApiError:
        """The 503 new work gets when the gateway is not serving."""
        if self.stage is Stage.STOPPING:
            return ShuttingDown()
        return ApiError(503, "the gateway is starting (ledger boot sweep); retry in a moment")
