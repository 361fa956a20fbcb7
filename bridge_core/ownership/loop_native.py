"""The running event loop's own events and clock, looked up once (ADR 0137).

``anyio.Event()`` and ``anyio.current_time()`` find the running backend (through sniffio) on
every call: about 2.5 us and 0.8 us on the benchmark machine, against 0.1 us for the loop's own
``asyncio.Event()`` and clock. The members' and the SQLite log's per-turn paths make an event
and read the clock several times a turn, so they look the loop up once and keep what it gives:
asyncio's or trio's ``Event`` class and clock. Both events wait the way ``anyio.Event`` waits
underneath (cancellable by anyio's cancel scopes: on asyncio the task is cancelled, trio's
``wait`` is a checkpoint), but waiting on one already set does not yield.

A task that parks alone (an idle delivery worker) needs less than an event: on asyncio its
``wake()`` is a bare future of its own (``FutureWake``), awaited without the event's coroutine,
waiter list and loop check (ADR 0178); under trio it is an event.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

__all__ = ["FutureWake", "LoopEvent", "LoopNative", "loop_native"]


class LoopEvent(Protocol):
    """What ``asyncio.Event`` and ``trio.Event`` have in common."""

    def set(self) -> None: ...

    def is_set(self) -> bool: ...

    def wait(self) -> Awaitable[object]: ...


class FutureWake:
    """A one-shot event for one waiting task, on asyncio: a future of its own, so a waiter
    that is cancelled cancels only its own wait (never share one between tasks)."""

    __slots__ = ("_future",)

    def __init__(self, future: asyncio.Future[Any]) -> None:
        self._future = future

    def set(self) -> None:
        if not self._future.done():  # done: set already, or its waiter was cancelled
            self._future.set_result(None)

    def is_set(self) -> bool:
        return self._future.done()

    def wait(self) -> Awaitable[object]:
        return self._future


class LoopNative:
    """``event()`` makes an event of the loop's library; ``clock()`` is the loop's time (under
    trio, the run's clock, so a mock clock is honoured as ``anyio.current_time`` honours it);
    ``call_at(when, callback, *args)`` is asyncio's timer on that clock (``None`` under trio,
    whose timers belong to tasks: use a cancel scope there). A timer costs a heap entry, where
    ``anyio.move_on_after`` also finds the task and its cancel scopes on the way in and out.
    ``wake()`` makes a one-shot event for a single waiting task (see the module docstring)."""

    __slots__ = ("call_at", "clock", "event", "wake")

    def __init__(
        self,
        event: Callable[[], LoopEvent],
        clock: Callable[[], float],
        call_at: Callable[..., asyncio.TimerHandle] | None,
        wake: Callable[[], LoopEvent],
    ) -> None:
        self.event = event
        self.clock = clock
        self.call_at = call_at
        self.wake = wake


def loop_native() -> LoopNative:
    """The running loop's event class and clock; call it from a task of that loop."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        import trio  # no asyncio loop runs here: anyio runs on trio

        return LoopNative(trio.Event, trio.current_time, None, trio.Event)
    return LoopNative(
        asyncio.Event, loop.time, loop.call_at, lambda: FutureWake(loop.create_future())
    )
