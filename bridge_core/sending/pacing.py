"""Pacing a channel ahead of the platform: a token bucket bounded by sliding windows.

A token bucket alone admits ``burst + per_second * W`` sends in any ``W``-second span, which
breaks an hourly cap (1,807 an hour on Teams' 7 + 0.5/s). ``BudgetGate`` therefore keeps the
times of recent sends and also refuses a send that would put more than ``limit`` sends in any
``seconds``-long window. It holds no clock: callers pass ``now`` (the sender passes
``anyio.current_time()``), so it is exact on a virtual clock.

The recorded times are bounded by the largest window limit, never by traffic.

A send is counted from the moment its call ended (``sent``), not from its grant: the platform
counts a request when it arrives, some time between the two, and a sender descheduled after its
grant (a loaded machine, a stalled loop) would otherwise have its send arrive late while the
sends after it are spaced from the early grant; worse, the bucket refills to its burst during
the stall, so a full burst follows at once the late arrival: ``burst + 1`` sends at the platform
in a moment (ADR 0144). The grant still takes its token at once, so no other send can go in
between.

``SendGate`` is what the sender asks before each send: ``reserve(now, priority=…)`` either takes
one send (returns ``0.0``) or says how many seconds to wait first, taking nothing; ``peek`` says
the same without taking the send, so a post can begin (the ledger claims its reply) only once its
slot is free, and reserve it right after (ADR 0028). ``BudgetGate``
is the in-process gate; the runtime hands a shared one (``bridge_core.runtime.shared_budget``) to
the senders of gateways that share a channel, so check and record are one step there, and the
priority orders the senders of different gateways (ADR 0055).
"""

from __future__ import annotations

from collections import deque
from typing import Protocol

from bridge_core.provider import SendBudget

__all__ = ["BudgetGate", "SendGate"]


class SendGate(Protocol):
    """Decides when a channel's next send may go; ``ChannelSender`` asks it before each send.

    A gate may also have ``async def ended(self, now: float) -> None``: the sender then awaits
    it once the send it granted last is over (its call answered or failed, or the grant went
    unused), so a gate shared by several senders can count a send as arriving at every moment
    until then (ADR 0145). A gate without it counts a send from its grant.
    """

    async def reserve(self, now: float, *, priority: int) -> float:
        """Take one send at once and return ``0.0``, or return the seconds to wait (nothing taken).

        ``now`` is the caller's ``anyio.current_time()``; a shared gate may read its own clock.
        ``priority`` is the send's class (a ``Priority``, 0 highest); a gate shared by several
        senders may hold lower classes back so that higher ones of other senders go first.
        """
        ...

    async def peek(self, now: float, *, priority: int) -> float:
        """``reserve``'s answer without taking the send: ``0.0`` when one would go now.

        A shared gate still counts the asker as waiting when it answers a wait (so a higher
        class keeps its turn); ``0.0`` records nothing, and ``reserve`` must follow to send.
        """
        ...


class BudgetGate:
    """When the next send may go, given a ``SendBudget`` and the sends recorded so far."""

    __slots__ = ("_budget", "_history", "_keep", "_tokens", "_updated")

    def __init__(self, budget: SendBudget) -> None:
        self._budget = budget
        self._tokens = float(budget.burst)
        self._updated: float | None = None
        self._keep = max((w.limit for w in budget.windows), default=0)
        self._history: deque[float] = deque(maxlen=self._keep or 1)

    @property
    def budget(self) -> SendBudget:
        return self._budget

    def _refill(self, now: float) -> None:
        if self._updated is None:
            self._updated = now
            return
        elapsed = now - self._updated
        if elapsed > 0:
            self._tokens = min(
                float(self._budget.burst), self._tokens + elapsed * self._budget.per_second
            )
            self._updated = now

    def delay(self, now: float) -> float:
        """Seconds from ``now`` until one more send fits the bucket and every window (0 = now)."""
        self._refill(now)
        wait = 0.0
        if self._tokens < 1.0:
            wait = (1.0 - self._tokens) / self._budget.per_second
        history = self._history
        count = len(history)
        for window in self._budget.windows:
            if count >= window.limit:
                # The send ``limit`` places back must have left the window before another goes.
                wait = max(wait, history[count - window.limit] + window.seconds - now)
        return wait if wait > 1e-9 else 0.0

    async def reserve(self, now: float, *, priority: int) -> float:
        """``SendGate``: check and record in one step (never yields, so nothing can interleave).

        ``priority`` is not used: this gate serves one sender, which already sends its queue
        highest class first, so there is no one else to leave headroom for.
        """
        wait = self.delay(now)
        if wait == 0.0:
            self.record(now)
        return wait

    async def peek(self, now: float, *, priority: int) -> float:
        """``SendGate``: ``delay(now)``, taking nothing."""
        return self.delay(now)

    def record(self, now: float) -> None:
        """Spend one send at ``now`` (call it for every attempt the platform sees)."""
        self._refill(now)
        self._tokens -= 1.0
        if self._keep:
            self._history.append(now)

    async def ended(self, now: float) -> None:
        """``SendGate``'s end of a send: ``sent(now)`` (the sender awaits it after each call)."""
        self.sent(now)

    def sent(self, now: float) -> None:
        """The send recorded last has ended at ``now``: count it from ``now`` instead (ADR 0144).

        Its call may have reached the platform at any moment up to ``now``, so the windows count
        it from ``now``, and the bucket holds what it would had the token been taken at ``now``:
        what refilled meanwhile, but never more than ``burst - 1`` (a refill the burst capped
        during the call is not the send's to keep). Exact while nothing else was recorded since
        the send's ``record``, which holds for the one sender this gate serves (it sends one
        operation at a time).
        """
        self._refill(now)
        self._tokens = min(self._tokens, float(self._budget.burst) - 1.0)
        if self._keep and self._history and self._history[-1] < now:
            self._history[-1] = now
