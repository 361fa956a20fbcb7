"""Inbound messages: dedup that survives rebuilds, and the reconnect watcher.

- ``InboundDedup`` drops a message id seen within its window (default 600 s, bounded size, an
  injectable monotonic clock); ``adopt(previous)`` carries the live ids of a rebuilt provider's
  old instance over at their original seen times. ``filter_into(sink, message, dedup=...)`` is
  the one filter (a replay within the window, or a bot's message, is dropped);
  ``deduplicated(sink, dedup)`` wraps a sink in it.
- ``ReconnectWatcher(factory, sink, platform=..., on_reconnected=...)`` runs a provider's
  ``receive``; on ``ConnectionLost``/``TransportError`` it rebuilds the provider (30 s backoff
  doubling to a 300 s cap, forever), hands the new instance the old dedup's ids, and calls
  ``on_reconnected(platform)``; on ``Unreachable`` it logs one line and stops. Its
  ``statistics()`` is a frozen ``WatcherStatistics``.

Durable dedup (seen ids that survive a restart, checked atomically with the turn's append) is the
conversation log's ``admit`` in ``bridge_core.ownership``: the runtime puts this in-process filter
in front of it, so a replay is dropped cheaply here and exactly there.

The runtime's wiring::

    watcher = ReconnectWatcher(
        build_provider, admit_to_log, platform="slack", on_reconnected=ledger.redeliver_failed
    )
    tg.start_soon(watcher.run)
"""

from bridge_core.inbound.dedup import (
    DEFAULT_DEDUP_SIZE,
    DEFAULT_DEDUP_WINDOW,
    InboundDedup,
    deduplicated,
    filter_into,
)
from bridge_core.inbound.statistics import WatcherStatistics
from bridge_core.inbound.watcher import (
    DEFAULT_INITIAL_BACKOFF,
    DEFAULT_MAX_BACKOFF,
    ReconnectWatcher,
    backoff_delay,
)

__all__ = [
    "DEFAULT_DEDUP_SIZE",
    "DEFAULT_DEDUP_WINDOW",
    "DEFAULT_INITIAL_BACKOFF",
    "DEFAULT_MAX_BACKOFF",
    "InboundDedup",
    "ReconnectWatcher",
    "WatcherStatistics",
    "backoff_delay",
    "deduplicated",
    "filter_into",
]
