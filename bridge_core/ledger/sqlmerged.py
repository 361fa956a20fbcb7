"""The SQLite ledger's hot statements, done for many rows at once inside the writer's batch.

Recording, claiming and settling a reply are each one multi-row statement per group commit
(``INSERT … VALUES (…), (…) …`` and ``UPDATE … FROM (VALUES …)``), not one statement per reply:
each statement is a trip through sqlite3 during which the writer thread may lose the GIL to the
event loop. The conditions are those of the single-row statements, row by row: a claim is still
a compare-and-swap on the fence it read, re-checking the owner; a held update still needs this
owner, the fence and ``attempting``. An id that appears twice in one batch goes in a later
statement of the same transaction, so the second sees the first's change exactly as it would
have in a batch of its own.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from bridge_core.ledger.model import Obligation
from bridge_core.ledger.rows import COLUMNS, encode_chunks, to_obligation

__all__ = ["MergedClaims", "MergedHeldUpdates", "MergedRecords"]

T = TypeVar("T")

_CHUNK = 400  # rows per statement: far under SQLite's 32,766 bound variables
_OPEN = "('pending', 'attempting', 'failed')"
_RETURNING = "RETURNING " + ", ".join(f"ledger.{name.strip()}" for name in COLUMNS.split(","))

HeldItem = tuple[str, int, float, str | None, float | None, int, str | None, str | None]
"""id, fence, now, new state (``None``: stays attempting), next_attempt_at, penalty,
last_error, the delivered ref as JSON (``None``: none)."""


def _rounds(items: Sequence[T], key: Callable[[T], str]) -> Iterator[list[tuple[int, T]]]:
    """``(index, item)`` in statements of at most ``_CHUNK`` items, each id once per statement
    (a repeated id waits for a later statement)."""
    pending = list(enumerate(items))
    while pending:
        seen: set[str] = set()
        now: list[tuple[int, T]] = []
        later: list[tuple[int, T]] = []
        for indexed in pending:
            name = key(indexed[1])
            if name in seen or len(now) >= _CHUNK:
                later.append(indexed)
            else:
                seen.add(name)
                now.append(indexed)
        yield now
        pending = later


def _values(rows: int, width: int) -> str:
    row = "(" + ", ".join("?" * width) + ")"
    return ", ".join([row] * rows)


class MergedRecords:
    """``record`` for many replies: one ``INSERT … ON CONFLICT (id) DO NOTHING RETURNING id``;
    ids that existed are read back as they are."""

    def __init__(self, owner: str) -> None:
        self.owner = owner

    def run_many(
        self, conn: sqlite3.Connection, items: Sequence[Obligation]
    ) -> list[tuple[Obligation, bool]]:
        results: list[tuple[Obligation, bool] | None] = [None] * len(items)
        for chunk in _rounds(items, lambda fresh: fresh.id):
            params: list[Any] = []
            for _, fresh in chunk:
                params += (
                    fresh.id,
                    fresh.profile,
                    fresh.platform,
                    fresh.channel,
                    fresh.thread,
                    fresh.reply_to,
                    fresh.text,
                    encode_chunks(fresh.text, fresh.chunks),
                    self.owner,
                    fresh.created_at,
                    fresh.updated_at,
                )
            created = {
                found[0]
                for found in conn.execute(
                    "INSERT INTO ledger (id, profile, platform, channel, thread, reply_to, text, "
                    "chunks, owner, created_at, updated_at, state) "
                    f"SELECT *, 'pending' FROM (VALUES {_values(len(chunk), 11)}) "
                    "WHERE true ON CONFLICT (id) DO NOTHING RETURNING id",
                    params,
                )
            }
            existing = [fresh.id for _, fresh in chunk if fresh.id not in created]
            found: dict[str, Obligation] = {}
            if existing:
                marks = ", ".join("?" * len(existing))
                found = {
                    row[0]: to_obligation(row)
                    for row in conn.execute(
                        f"SELECT {COLUMNS} FROM ledger WHERE id IN ({marks})", existing
                    )
                }
            for index, fresh in chunk:
                if fresh.id in created:
                    results[index] = (fresh, True)
                else:
                    results[index] = (found[fresh.id], False)
        return [result for result in results if result is not None]


class MergedClaims:
    """``claim`` for many rows: one compare-and-swap ``UPDATE … FROM (VALUES (id, fence, now))``.

    A row is claimed when it still has the fence its claimer read, is open, and its owner is
    unset, this process or dead (``owner_alive``, re-checked inside the statement)."""

    def __init__(self, owner: str, forget_live: Callable[[], None]) -> None:
        self.owner = owner
        self._forget_live = forget_live

    def run_many(
        self, conn: sqlite3.Connection, items: Sequence[tuple[str, int, float]]
    ) -> list[Obligation | None]:
        results: list[Obligation | None] = [None] * len(items)
        for chunk in _rounds(items, lambda item: item[0]):
            self._forget_live()
            params: list[Any] = [self.owner]
            for _, item in chunk:
                params += item
            params.append(self.owner)
            claimed = {
                row[0]: row
                for row in conn.execute(
                    "UPDATE ledger SET state = 'attempting', owner = ?, fence = fence + 1, "
                    "attempts = attempts + 1, "
                    "resends = resends + CASE WHEN attempts > 0 AND NOT penalty THEN 1 ELSE 0 END, "
                    "penalty = 0, next_attempt_at = NULL, updated_at = c.column3 "
                    f"FROM (VALUES {_values(len(chunk), 3)}) AS c "
                    "WHERE ledger.id = c.column1 AND ledger.fence = c.column2 "
                    f"AND ledger.state IN {_OPEN} AND (ledger.owner IS NULL OR ledger.owner = ? "
                    f"OR NOT owner_alive(ledger.owner)) {_RETURNING}",
                    params,
                )
            }
            for index, (obligation_id, _fence, _now) in chunk:
                row = claimed.get(obligation_id)
                results[index] = None if row is None else to_obligation(row)
        return results


class MergedHeldUpdates:
    """``progress`` and ``settle`` for many rows: one ``UPDATE … FROM (VALUES …)`` conditioned,
    row by row, on this owner, the fence it holds and ``attempting``."""

    def __init__(self, owner: str) -> None:
        self.owner = owner

    def run_many(
        self, conn: sqlite3.Connection, items: Sequence[HeldItem]
    ) -> list[Obligation | None]:
        results: list[Obligation | None] = [None] * len(items)
        for chunk in _rounds(items, lambda item: item[0]):
            params: list[Any] = []
            for _, item in chunk:
                params += item
            params.append(self.owner)
            changed = {
                row[0]: row
                for row in conn.execute(
                    "UPDATE ledger SET updated_at = c.column3, "
                    "state = COALESCE(c.column4, state), "
                    "next_attempt_at = CASE WHEN c.column4 IS NULL THEN next_attempt_at "
                    "ELSE c.column5 END, "
                    "penalty = CASE WHEN c.column4 IS NULL THEN penalty ELSE c.column6 END, "
                    "last_error = COALESCE(c.column7, last_error), "
                    "delivered = CASE WHEN c.column8 IS NULL THEN delivered ELSE json_insert("
                    "CASE WHEN delivered = '' THEN '[]' ELSE delivered END, '$[#]', "
                    "json(c.column8)) END "
                    f"FROM (VALUES {_values(len(chunk), 8)}) AS c "
                    "WHERE ledger.id = c.column1 AND ledger.fence = c.column2 "
                    f"AND ledger.owner = ? AND ledger.state = 'attempting' {_RETURNING}",
                    params,
                )
            }
            for index, item in chunk:
                row = changed.get(item[0])
                results[index] = None if row is None else to_obligation(row)
        return results
