"""The pure rules, one by one: error readings to row changes, claim verdicts, owner liveness."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from bridge_core.ledger import Obligation, Owner, Schedule, State
from bridge_core.ledger.owner import current_owner, is_alive_here, process_start
from bridge_core.ledger.schedule import (
    Abandon,
    Send,
    after_failure,
    needs_marker,
    verdict_at_claim,
)
from bridge_core.provider import (
    ConnectionLost,
    Forbidden,
    MessageRejected,
    NotFound,
    RateLimited,
    TransportError,
    Unreachable,
)

NOW = 1_000_000.0
SCHEDULE = Schedule()


def row(**changes: object) -> Obligation:
    base: dict[str, object] = {
        "id": "o",
        "profile": "X",
        "platform": "slack",
        "channel": "C",
        "thread": None,
        "reply_to": None,
        "text": "t",
        "chunks": ("t",),
        "state": State.ATTEMPTING,
        "attempts": 1,
        "resends": 0,
        "fence": 1,
        "owner": "me",
        "created_at": NOW - 10,
        "updated_at": NOW,
        "next_attempt_at": None,
        "last_error": None,
    }
    base.update(changes)
    return Obligation(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("resends", "error", "state", "delay", "penalty"),
    [
        (0, TransportError("503"), State.FAILED, 30.0, False),
        (1, TransportError("503"), State.FAILED, 120.0, False),
        (2, TransportError("503"), State.FAILED, None, False),  # left to the next start
        (3, TransportError("503"), State.ABANDONED, None, False),
        (0, ConnectionLost("dropped"), State.FAILED, 30.0, False),
        (0, KeyError("unclassified"), State.FAILED, 30.0, False),
        (1, NotFound("thread"), State.FAILED, 120.0, False),
        (0, Forbidden("no access"), State.FAILED, None, False),
        (3, Forbidden("no access"), State.ABANDONED, None, False),
        (0, Unreachable("blocked"), State.ABANDONED, None, False),
        (0, MessageRejected("msg_too_long"), State.ABANDONED, None, False),
        (2, MessageRejected("500 on a post"), State.ABANDONED, None, False),
        (3, RateLimited(retry_after=12.5), State.FAILED, 12.5, True),  # never budget-bound
        (0, RateLimited(), State.FAILED, 5.0, True),
    ],
)
def test_each_error_reading_maps_to_one_row_change(
    resends: int, error: BaseException, state: State, delay: float | None, penalty: bool
) -> None:
    change = after_failure(row(resends=resends), error, now=NOW, schedule=SCHEDULE)
    assert change.state is state
    assert change.next_attempt_at == (None if delay is None else NOW + delay)
    assert change.penalty is penalty
    assert type(error).__name__ in change.last_error


def test_a_rejected_reply_is_abandoned_with_the_platforms_reason() -> None:
    change = after_failure(
        row(),
        MessageRejected("Slack refused the message: msg_too_long"),
        now=NOW,
        schedule=SCHEDULE,
    )
    assert change.state is State.ABANDONED and change.next_attempt_at is None
    assert not change.in_process and not change.penalty
    assert change.last_error == "MessageRejected: Slack refused the message: msg_too_long"


def test_the_marker_is_read_from_the_state_before_the_claim() -> None:
    assert not needs_marker(State.PENDING, 0)
    assert needs_marker(State.PENDING, 1)
    assert needs_marker(State.ATTEMPTING, 0)
    assert needs_marker(State.FAILED, 1)


def test_claim_verdicts_bound_by_freshness_and_budget() -> None:
    assert verdict_at_claim(row(state=State.PENDING, attempts=0), now=NOW, schedule=SCHEDULE) == (
        Send(marked=False)
    )
    assert verdict_at_claim(row(resends=2), now=NOW, schedule=SCHEDULE) == Send(marked=True)
    spent = verdict_at_claim(row(resends=3), now=NOW, schedule=SCHEDULE)
    assert isinstance(spent, Abandon) and "budget" in spent.reason
    # a penalty retry spends nothing, so the budget does not stop it
    assert verdict_at_claim(
        row(resends=3, penalty=True, state=State.FAILED), now=NOW, schedule=SCHEDULE
    ) == Send(marked=True)
    stale = verdict_at_claim(row(created_at=NOW - 86401), now=NOW, schedule=SCHEDULE)
    assert isinstance(stale, Abandon) and "freshness" in stale.reason


def test_owner_identity_and_liveness_on_this_host() -> None:
    me = current_owner()
    assert me.host == socket.gethostname()
    assert Owner.parse(str(me)) == me
    assert is_alive_here(str(me))
    assert not is_alive_here(str(Owner("another-host", me.pid, me.started)))
    assert not is_alive_here(str(Owner(me.host, me.pid, "other-boot:1")))  # a reused pid
    assert not is_alive_here("not an owner")
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    started = process_start(child.pid)
    assert started is not None
    owner = str(Owner(me.host, child.pid, started))
    assert is_alive_here(owner)
    child.kill()
    try:
        # Killed but not reaped yet: a zombie, which is dead.
        for _ in range(200):
            if not is_alive_here(owner):
                break
            subprocess.run(["sleep", "0.01"], check=True)
        assert not is_alive_here(owner)
    finally:
        child.wait()
    assert not is_alive_here(owner)
    with pytest.raises(ValueError, match="not an owner id"):
        Owner.parse("nopipes")
