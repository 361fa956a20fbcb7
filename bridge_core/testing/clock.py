"""Virtual time for tests and simulations: anyio on trio's ``MockClock(autojump_threshold=0)``.

With autojump at 0 the clock leaps to the next deadline whenever every task is blocked, so an
hour of pacing runs in milliseconds and every timestamp is exact. In a test module::

    from bridge_core.testing.clock import anyio_backend  # noqa: F401  (the fixture)

    @pytest.mark.anyio
    async def test_x() -> None: ...

Autojump also fires while a task waits on a worker thread, so only I/O-free code belongs here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
import trio
import trio.testing

__all__ = ["anyio_backend", "run_virtual", "virtual_backend"]

T = TypeVar("T")


def virtual_backend() -> tuple[str, dict[str, Any]]:
    """The anyio backend spec for trio with a fresh autojumping ``MockClock``."""
    return ("trio", {"clock": trio.testing.MockClock(autojump_threshold=0)})


@pytest.fixture
def anyio_backend() -> tuple[str, dict[str, Any]]:
    """The anyio pytest plugin's backend fixture, on virtual time."""
    return virtual_backend()


def run_virtual(function: Callable[..., Awaitable[T]], *args: Any) -> T:
    """Run ``function(*args)`` to completion on trio's virtual clock (time starts at 0)."""
    return trio.run(function, *args, clock=trio.testing.MockClock(autojump_threshold=0))
