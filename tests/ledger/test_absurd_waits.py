"""A rate limit whose wait is not usable falls back on the default back-off (ADR 0027).

``RateLimited`` keeps ``retry_after`` as a finite number of seconds from 0 to
``RETRY_AFTER_LIMIT``, or ``None``, whatever a provider passes (one place); here each store
(memory, SQLite, PostgreSQL) shows the consequence: the row waits the default penalty, its
in-process timer fires once, a sweep takes it when its owner died, and no reply is left
``failed`` with no way out.
"""

from __future__ import annotations

import math
from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge_core.ledger import Delivery, DeliveryLedger, Reply, Schedule, State
from bridge_core.ledger.rows import new_row
from bridge_core.ledger.schedule import after_failure
from bridge_core.provider import RETRY_AFTER_LIMIT, MessageRef, RateLimited

ABSURD = [math.inf, -math.inf, math.nan, float("1e309"), -1.0, -1e-9, 1e12, 10**400]
PENALTY = 0.1  # the schedule's default penalty here, in real seconds


@given(
    st.one_of(
        st.floats(allow_nan=True, allow_infinity=True),
        st.integers(min_value=-(10**400), max_value=10**400),
        st.text(max_size=5),
        st.booleans(),
        st.none(),
    )
)
def test_retry_after_is_usable_or_none_whatever_is_passed(value: Any) -> None:
    error = RateLimited("slow", retry_after=value)
    wait = error.retry_after
    assert error.retry_after_given is value
    if wait is not None:
        assert isinstance(wait, float) and 0.0 <= wait <= RETRY_AFTER_LIMIT
        assert wait == value and not isinstance(value, bool)
    elif isinstance(value, float) and not isinstance(value, bool):
        assert not 0.0 <= value <= RETRY_AFTER_LIMIT  # nan, inf, negative or absurd
    error.retry_after = math.inf  # an assignment is checked the same way
    assert error.retry_after is None


@pytest.mark.parametrize("given_wait", ABSURD, ids=lambda v: repr(v)[:12])
def test_the_schedule_waits_the_default_penalty(given_wait: float) -> None:
    now = 1_000_000.0
    claimed = new_row(_reply(0), owner="me", now=now - 10)
    change = after_failure(
        claimed, RateLimited(retry_after=given_wait), now=now, schedule=Schedule()
    )
    assert change.state is State.FAILED and change.penalty and change.in_process
    assert change.next_attempt_at == now + Schedule().default_penalty


def _reply(n: int) -> Reply:
    return Reply.answering(
        profile="X", platform="slack", channel="C1", answers=f"absurd-{n}", text=f"r{n}"
    )


class Platform:
    """Refuses each reply's first send with the given wait, then takes it."""

    def __init__(self, wait: float) -> None:
        self.wait = wait
        self.calls: dict[str, int] = {}
        self.delivered: dict[str, anyio.Event] = {}

    def event(self, obligation: str) -> anyio.Event:
        return self.delivered.setdefault(obligation, anyio.Event())

    async def deliver(self, delivery: Delivery) -> MessageRef:
        await delivery.begin()
        n = self.calls.get(delivery.obligation_id, 0) + 1
        self.calls[delivery.obligation_id] = n
        if n == 1:
            raise RateLimited("absurd", retry_after=self.wait)
        self.event(delivery.obligation_id).set()
        return MessageRef("C1", f"m-{delivery.obligation_id}-{n}")


def _schedule() -> Schedule:
    return Schedule(default_penalty=PENALTY, sweep_interval=0.2)


@pytest.mark.anyio
@pytest.mark.parametrize("given_wait", [math.inf, math.nan, -5.0, 1e12], ids=repr)
async def test_the_timer_resends_once_after_the_default_penalty(
    harness: Any, given_wait: float
) -> None:
    store = await harness.store(me=True)
    platform = Platform(given_wait)
    ledger = DeliveryLedger(
        store, deliver=platform.deliver, profiles={"X"}, schedule=_schedule(), deliver_begins=True
    )
    async with anyio.create_task_group() as group:
        await group.start(ledger.run)
        started = anyio.current_time()
        row = await ledger.submit(_reply(1))
        assert row.state is State.FAILED and row.penalty
        assert row.next_attempt_at is not None and math.isfinite(row.next_attempt_at)
        assert row.next_attempt_at - row.updated_at == pytest.approx(PENALTY, abs=0.05)
        with anyio.fail_after(10):
            await platform.event(row.id).wait()
        took = anyio.current_time() - started
        await anyio.sleep(3 * PENALTY)  # a timer firing in a loop would show as more calls
        group.cancel_scope.cancel()
    assert took >= PENALTY * 0.9
    assert platform.calls[row.id] == 2
    final = await store.get(row.id)
    assert final is not None and final.state is State.DELIVERED


@pytest.mark.anyio
@pytest.mark.parametrize("given_wait", [math.inf, math.nan, -1.0], ids=repr)
async def test_a_sweep_takes_the_row_of_a_dead_owner_after_the_default_penalty(
    harness: Any, given_wait: float
) -> None:
    dying = await harness.store()
    platform = Platform(given_wait)
    first = DeliveryLedger(
        dying, deliver=platform.deliver, profiles={"X"}, schedule=_schedule(), deliver_begins=True
    )
    row = await first.submit(_reply(2))  # fails; its timer dies with its owner
    assert row.state is State.FAILED and row.next_attempt_at is not None
    await harness.kill(dying)
    survivor = DeliveryLedger(
        await harness.store(me=True),
        deliver=platform.deliver,
        profiles={"X"},
        schedule=_schedule(),
        deliver_begins=True,
    )
    async with anyio.create_task_group() as group:
        await group.start(survivor.run)
        with anyio.fail_after(10):
            await platform.event(row.id).wait()
        group.cancel_scope.cancel()
    assert platform.calls[row.id] == 2
    final = await survivor.store.get(row.id)
    assert final is not None and final.state is State.DELIVERED and final.resends == 0
