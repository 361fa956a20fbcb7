"""The delivery ledger: every reply recorded durably before its first send, resent after a crash,
with the possible duplicates labelled.

How the runtime uses it::

    from bridge_core.ledger import DeliveryLedger, Reply, open_store

    store = await open_store(config.ledger)            # a path (SQLite) or postgresql://...
    ledger = DeliveryLedger(
        store,
        deliver=deliver,                               # async (Delivery) -> MessageRef
        profiles={"X", "Y"},                           # claims only these profiles' rows
        connected=lambda platform: platform in live,   # rows of other platforms keep waiting
    )
    await ledger.boot_sweep()                          # before serving
    task_group.start_soon(ledger.run)                  # timers, orphan sweeps, pruning, lease
    row, created = await ledger.record(Reply.answering(profile=..., platform=..., channel=...,
                                                       answers=turn_id, text=reply_text,
                                                       thread=..., reply_to=..., chunks=parts))
    # ... 202 / frame recorded: the reply survives a crash from here on
    if created:                                        # an id recorded before is its first's
        row = await ledger.deliver_now(row)            # claims by fence and sends
    # or both in one call: row = await ledger.submit(reply)
    await ledger.redeliver_failed("slack")             # after the watcher rebuilt the provider
    counts = await ledger.counts_by_state()            # {State: int} for /metrics
    await store.aclose()

``deliver(delivery)`` posts ``delivery.text`` (the part, after the recovery marker when the send
may be a duplicate) to ``delivery.channel`` / ``delivery.thread`` and returns the ``MessageRef``;
it raises ``ProviderError`` subclasses, read through ``bridge_core.provider.ERROR_TABLE``. The
runtime chunks replies leaving ``marker_headroom(unit)`` free in each part, in the platform's
unit. When
``deliver`` waits for the channel's turn (a paced sender), build the ledger with
``deliver_begins=True`` and have ``deliver`` await ``delivery.begin()`` right before the platform
call: the row is claimed then, so a reply still queued at a crash goes out clean, unlabelled.
``DisabledLedger(deliver=...)`` has the same calls and records nothing (``delivery_ledger =
false``). ``key_value_store(store)`` gives the providers' key-value store kept beside the ledger
(``bridge_core.provider.KeyValueStore``).

Rules (``docs/ledger-schedule.md`` has the table): first send at once; a transient failure is
resent in process after 30 s, then 2 min; the third resend is left to the next start;
``RateLimited`` waits out its penalty without spending the budget; ``Unreachable`` and
``MessageRejected`` are abandoned at once; three resends and 24 h of freshness, then abandoned;
delivered rows pruned after 7 days.

Exception hierarchy::

    LedgerError      a store could not be opened or used (bad URL, unreadable file, schema)
    ClaimLost        raised by ``Delivery.begin()``: another claimer took the row while the
                     reply waited for its turn (the delivery function sends nothing)
"""

from __future__ import annotations

from bridge_core.ledger.disabled import DisabledLedger
from bridge_core.ledger.engine import DeliveryLedger, SweepOutcome, SweepReport
from bridge_core.ledger.inflight import RecordInFlight
from bridge_core.ledger.kv import key_value_store
from bridge_core.ledger.memory import MemoryBackend, MemoryLedgerStore
from bridge_core.ledger.model import (
    ClaimLost,
    Deliver,
    Delivery,
    LedgerError,
    LedgerWriter,
    Obligation,
    Owner,
    Reply,
    State,
)
from bridge_core.ledger.open import open_store
from bridge_core.ledger.schedule import (
    MARKER,
    MARKER_HEADROOM,
    MARKER_PARTIAL,
    Schedule,
    is_marked,
    marker_headroom,
)
from bridge_core.ledger.statistics import LedgerStatistics
from bridge_core.ledger.store import LedgerStore, Scope

__all__ = [
    "MARKER",
    "MARKER_HEADROOM",
    "marker_headroom",
    "MARKER_PARTIAL",
    "ClaimLost",
    "Deliver",
    "Delivery",
    "DeliveryLedger",
    "DisabledLedger",
    "LedgerError",
    "LedgerStatistics",
    "LedgerStore",
    "LedgerWriter",
    "MemoryBackend",
    "MemoryLedgerStore",
    "Obligation",
    "Owner",
    "RecordInFlight",
    "Reply",
    "Schedule",
    "Scope",
    "State",
    "SweepOutcome",
    "SweepReport",
    "is_marked",
    "key_value_store",
    "open_store",
]
