"""What a channel's sender has done and where it stands, as one frozen snapshot.

``ChannelSender.statistics()`` returns a ``SenderStatistics`` (as anyio's streams return theirs):
the counters since the sender was made, and its state when it was asked. The sender counts into
a ``SenderCounts`` of its own, which nothing outside it holds.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SenderCounts", "SenderStatistics"]


@dataclass(slots=True)
class SenderCounts:
    """The counters a sender increments: attempts by kind and what the platform answered."""

    sends: int = 0
    posts: int = 0
    edits: int = 0
    delivered: int = 0
    rate_limit_pauses: int = 0
    backoffs: int = 0
    not_found: int = 0
    rejected: int = 0
    forbidden: int = 0
    unreachable: int = 0
    transport_errors: int = 0
    superseded: int = 0
    skipped: int = 0
    contained: int = 0  # unexpected exceptions contained to one piece of work (ADR 0026)


@dataclass(frozen=True, slots=True)
class SenderStatistics:
    """``ChannelSender.statistics()``: its counters, then its state when asked."""

    sends: int
    posts: int
    edits: int
    delivered: int
    rate_limit_pauses: int
    backoffs: int
    not_found: int
    rejected: int
    forbidden: int
    unreachable: int
    transport_errors: int
    superseded: int
    skipped: int
    contained: int
    queued: int
    """Operations waiting to be sent."""
    paused: bool
    """A rate-limit pause or back-off is running."""
    healthy: bool
    health_reason: str | None
    sends_last_second: int
    sends_last_minute: int
    sends_last_hour: int
    """Attempts in the last second, minute and hour (of the most recent 4096)."""
