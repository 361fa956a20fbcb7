"""The resend schedule and the recovery marker: pure decisions, no I/O, no clock of their own.

Every function takes the row and ``now`` and returns what to do, so the rules are tested exactly
(``docs/ledger-schedule.md`` has the table). The error readings come from
``bridge_core.provider.ERROR_TABLE``; this module only maps each ``LedgerAction`` to a row change.
"""

from __future__ import annotations

from dataclasses import dataclass

from bridge_core.ledger.model import Obligation, State
from bridge_core.provider import LedgerAction, LengthUnit, RateLimited, reading_for
from bridge_core.text import measure

__all__ = [
    "MARKER",
    "MARKER_HEADROOM",
    "MARKER_PARTIAL",
    "Abandon",
    "Schedule",
    "Send",
    "Settlement",
    "after_failure",
    "is_marked",
    "marker_for",
    "marker_headroom",
    "needs_marker",
    "verdict_at_claim",
]

MARKER = "♻️ Recovered reply — this reply may be a duplicate:"
"""Put before a resend that may duplicate a copy the platform already has."""

MARKER_PARTIAL = (
    "♻️ Recovered reply — earlier parts of this reply may already be above; "
    "this part may be a duplicate:"
)
"""Put before the first part resent after some parts of a chunked reply were delivered."""

MARKER_HEADROOM = len(MARKER_PARTIAL) + 1
"""Characters to leave free in each part for the marker and a newline; chunk with
``marker_headroom(unit)``, which counts them in the platform's own unit."""


def marker_headroom(unit: LengthUnit) -> int:
    """What the longest recovery marker and its newline take of a part, counted in ``unit`` (the
    provider's ``capabilities.length_unit``): 107 UTF-8 bytes where it is 101 characters. A part
    chunked at ``max_length - marker_headroom(unit)`` still fits when it is resent marked."""
    return max(measure(f"{marker}\n", unit) for marker in (MARKER, MARKER_PARTIAL))


_MARKER_START = "♻️ Recovered reply — "
_MARKER_END = "may be a duplicate:"


def is_marked(text: str) -> bool:
    """Whether a posted text starts with the recovery marker (``♻️ Recovered reply — …``)."""
    first_line = text.split("\n", 1)[0]
    return first_line.startswith(_MARKER_START) and first_line.endswith(_MARKER_END)


@dataclass(frozen=True, slots=True)
class Schedule:
    """The ledger's constants. Change them only in tests and unusual deployments.

    ``resend_delays[k]`` is the in-process wait before resend ``k + 1`` after a transient
    failure; resends past the delays (the third) are left to the next start. ``max_resends``
    and ``freshness`` bound resending; then the row is abandoned. ``keep_delivered`` is how long
    delivered rows are kept before pruning. ``death_watch`` is how often the ledger asks its
    store whether an owner died, to take that owner's rows over at once (ADR 0019).
    """

    resend_delays: tuple[float, ...] = (30.0, 120.0)
    max_resends: int = 3
    freshness: float = 24 * 3600.0
    keep_delivered: float = 7 * 24 * 3600.0
    default_penalty: float = 5.0
    sweep_interval: float = 15.0
    death_watch: float = 0.5
    prune_interval: float = 3600.0
    concurrency: int = 64

    def __post_init__(self) -> None:
        if self.max_resends < 0:
            raise ValueError(f"Schedule.max_resends must be >= 0, got {self.max_resends}")
        if any(d < 0 for d in self.resend_delays):
            raise ValueError(f"Schedule.resend_delays must be >= 0, got {self.resend_delays}")
        positive = (
            "freshness",
            "keep_delivered",
            "sweep_interval",
            "prune_interval",
            "death_watch",
        )
        for name in positive:
            if getattr(self, name) <= 0:
                raise ValueError(f"Schedule.{name} must be positive, got {getattr(self, name)}")
        if self.concurrency < 1:
            raise ValueError(f"Schedule.concurrency must be >= 1, got {self.concurrency}")


def needs_marker(state: State, attempts: int) -> bool:
    """Whether a send may duplicate an earlier one, read from the row's state *before* the claim.

    ``attempting`` (died mid-send), ``failed`` (the platform may have kept a failed send), and a
    ``pending`` row with attempts (an older build's claim) may all have reached the platform.
    """
    if state in (State.ATTEMPTING, State.FAILED):
        return True
    return state is State.PENDING and attempts > 0


def marker_for(*, first_part: int) -> str:
    """The marker for a marked send that starts at part ``first_part`` (0 for the whole reply)."""
    return MARKER_PARTIAL if first_part > 0 else MARKER


def spends_resend(row: Obligation) -> bool:
    """Whether claiming ``row`` spends the resend budget: any send after the first, except the
    retry that follows a rate-limit penalty."""
    return row.attempts > 0 and not row.penalty


@dataclass(frozen=True, slots=True)
class Abandon:
    reason: str


@dataclass(frozen=True, slots=True)
class Send:
    marked: bool


_SENDS = (Send(marked=False), Send(marked=True))  # frozen: one of each serves every row


def verdict_at_claim(row: Obligation, *, now: float, schedule: Schedule) -> Abandon | Send:
    """What a claim of ``row`` (read before the claim) must do: send it, or abandon it."""
    if now - row.created_at > schedule.freshness:
        return Abandon(f"older than the {schedule.freshness:.0f} s freshness bound")
    if spends_resend(row) and row.resends >= schedule.max_resends:
        return Abandon(f"resend budget spent ({row.resends} of {schedule.max_resends})")
    return _SENDS[needs_marker(row.state, row.attempts)]


@dataclass(frozen=True, slots=True, kw_only=True)
class Settlement:
    """The row change after a failed send. ``next_attempt_at`` ``None`` on a ``failed`` row
    means no timer: the next start (or a reconnect's redelivery) resends it."""

    state: State
    next_attempt_at: float | None
    penalty: bool
    last_error: str
    in_process: bool


def _describe(error: BaseException) -> str:
    text = str(error) or "(no message)"
    return f"{type(error).__name__}: {text}"[:500]


def after_failure(
    row: Obligation, error: BaseException, *, now: float, schedule: Schedule
) -> Settlement:
    """The row change after ``error`` from a send of ``row`` (the row as claimed).

    ``row.resends`` already counts the send that failed when that send was a resend.
    """
    reading = reading_for(error)
    described = _describe(error)
    action = reading.ledger
    if action is LedgerAction.ABANDON:
        # Unreachable (the channel is gone) and MessageRejected (the platform refused this reply,
        # or it must not be resent) alike: no resend can help, so the row stops here.
        return Settlement(
            state=State.ABANDONED,
            next_attempt_at=None,
            penalty=False,
            last_error=described,
            in_process=False,
        )
    if action is LedgerAction.WAIT_PENALTY:
        # a usable wait or None, whatever the provider passed (ADR 0027)
        wait = error.retry_after if isinstance(error, RateLimited) else None
        if wait is None:
            wait = schedule.default_penalty
        return Settlement(
            state=State.FAILED,
            next_attempt_at=now + wait,
            penalty=True,
            last_error=described,
            in_process=True,
        )
    if row.resends >= schedule.max_resends:
        return Settlement(
            state=State.ABANDONED,
            next_attempt_at=None,
            penalty=False,
            last_error=f"{described} (resend budget spent)",
            in_process=False,
        )
    if action is LedgerAction.KEEP_FOR_RECHECK:
        # Access may come back: the reconnect's redelivery or the next start resends it.
        return Settlement(
            state=State.FAILED,
            next_attempt_at=None,
            penalty=False,
            last_error=described,
            in_process=False,
        )
    # RESEND_SCHEDULE and RESEND_AS_POST: the ledger always posts, so both follow the timers.
    if row.resends < len(schedule.resend_delays):
        return Settlement(
            state=State.FAILED,
            next_attempt_at=now + schedule.resend_delays[row.resends],
            penalty=False,
            last_error=described,
            in_process=True,
        )
    return Settlement(
        state=State.FAILED,
        next_attempt_at=None,
        penalty=False,
        last_error=described,
        in_process=False,
    )
