"""The delivery ledger's state as one frozen snapshot: ``DeliveryLedger.statistics()``.

The rows are counted in the store (this process's profiles only), so the call awaits one query;
the timers are this process's own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from bridge_core.ledger.model import State

__all__ = ["LedgerStatistics"]


@dataclass(frozen=True, slots=True)
class LedgerStatistics:
    """Rows of this process's profiles by state, and its pending in-process resend timers."""

    pending: int
    attempting: int
    delivered: int
    failed: int
    abandoned: int
    timers: int

    @classmethod
    def of(cls, counts: Mapping[State, int], *, timers: int) -> LedgerStatistics:
        return cls(
            pending=counts.get(State.PENDING, 0),
            attempting=counts.get(State.ATTEMPTING, 0),
            delivered=counts.get(State.DELIVERED, 0),
            failed=counts.get(State.FAILED, 0),
            abandoned=counts.get(State.ABANDONED, 0),
            timers=timers,
        )

    def by_state(self) -> dict[str, int]:
        """The rows as ``{state: count}`` over every state (``/v1/status``, ``/metrics``)."""
        return {state.value: getattr(self, state.name.lower()) for state in State}
