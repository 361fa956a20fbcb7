"""What a reconnect watcher has done and where it stands, as one frozen snapshot.

``ReconnectWatcher.statistics()`` returns a ``WatcherStatistics`` (as the sender and the ledger
return theirs): the counters since the watcher was made, and its state when it was asked.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["WatcherStatistics"]


@dataclass(frozen=True, slots=True)
class WatcherStatistics:
    """``ReconnectWatcher.statistics()``: its counters, then its state when asked."""

    reconnects: int
    """Rebuilt provider instances that took the connection over."""
    backoffs: int
    """Waits before a rebuild."""
    build_failures: int
    """Times the factory raised a transient error."""
    connections_lost: int
    """Times ``receive`` raised ``ConnectionLost`` or another ``TransportError``."""
    receiving: bool
    """A provider instance's ``receive`` is running now."""
    last_backoff: float | None
    """The most recent wait before a rebuild, in seconds; None before the first."""
    gave_up: str | None
    """Why ``run()`` ended for good (the ``Unreachable``'s text); None while it has not."""
    dedup_ids: int
    """Message ids the in-process dedup holds now (its window's worth)."""
