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
from bridge_core.ledger.rows import COLUMNS, INSERT_COLUMNS, insert_params, to_obligation

__all__ = [
    "CHUNK",
    "rounds",
    "ClaimItem",
    "ClaimResult",
    "HeldItem",
    "HeldResult",
    "DeliveredItem",
    "MergedClaims",
    "MergedDelivered",
    "MergedHeldUpdates",
    "MergedRecords",
]

T = TypeVar("T")

CHUNK = 400  # rows per statement: far under SQLite's 32,766 bound variables
_OPEN = "('pending', 'attempting', 'failed')"
_RETURNING_APPENDED = (
    "RETURNING ledger.id, ledger.last_error, "
    "CASE WHEN ledger.delivered = '' THEN 0 ELSE json_array_length(ledger.delivered) END, "
    "ledger.delivered"
)
_RETURNING = "RETURNING " + ", ".join(f"ledger.{name.strip()}" for name in COLUMNS.split(","))


def rounds(
    items: Sequence[T], key: Callable[[T], str], *, size: int = CHUNK
) -> Iterator[list[tuple[int, T]]]:
    """``(index, item)`` in statements of at most ``size`` items, each id once per statement
    (a repeated id waits for a later statement)."""
    if len(items) <= size and len({key(item) for item in items}) == len(items):
        yield list(enumerate(items))  # the common case: one statement, no id twice
        return
    pending = list(enumerate(items))
    while pending:
        seen: set[str] = set()
        now: list[tuple[int, T]] = []
        later: list[tuple[int, T]] = []
        for indexed in pending:
            name = key(indexed[1])
            if name in seen or len(now) >= size:
                later.append(indexed)
            else:
                seen.add(name)
                now.append(indexed)
        yield now
        pending = later


def _values(rows: int, width: int) -> str:
    row = "(" + ", ".join("?" * width) + ")"
    return ", ".join([row] * rows)


def _changed_ids(
    conn: sqlite3.Connection, statement: str, params: Sequence[Any], expected: int
) -> set[str] | None:
    """The ids ``statement`` (an ``UPDATE … FROM (VALUES …)`` of ``expected`` distinct ids)
    changed, or ``None`` when it changed a row for every one of them.

    ``RETURNING`` costs about as much as the update itself (500 rows: 5.1 ms with it, 2.4 ms
    without), and in a sweep nearly every item matches; so the statement runs without it,
    and only when it changed fewer rows than items is it undone (to the savepoint, inside the
    writer's transaction) and run again with it, to say which. Nothing else runs between the
    two, so the second run sees what the first did."""
    conn.execute("SAVEPOINT counted")
    if conn.execute(statement, params).rowcount == expected:
        conn.execute("RELEASE counted")
        return None
    conn.execute("ROLLBACK TO counted")
    conn.execute("RELEASE counted")
    return {found[0] for found in conn.execute(f"{statement} RETURNING ledger.id", params)}


class MergedRecords:
    """``record`` for many replies: one ``INSERT … ON CONFLICT (id) DO NOTHING RETURNING id``;
    ids that existed are read back as they are. Each new row goes in as built (``new_row``):
    ``pending``, or already claimed by this owner (ADR 0121), in the same statement."""

    def __init__(self, owner: str) -> None:
        self.owner = owner

    def run_many(
        self, conn: sqlite3.Connection, items: Sequence[Obligation]
    ) -> list[tuple[Obligation, bool]]:
        results: list[tuple[Obligation, bool] | None] = [None] * len(items)
        for chunk in rounds(items, lambda fresh: fresh.id):
            params: list[Any] = []
            for _, fresh in chunk:
                values = insert_params(fresh, owner=self.owner)
                thread, reply_to = values[4], values[5]
                if thread is None or reply_to is None:  # no NULL bound (see ``_NULL_TEXT``)
                    values = (
                        *values[:4],
                        _NULL_TEXT if thread is None else thread,
                        _NULL_TEXT if reply_to is None else reply_to,
                        *values[6:],
                    )
                params += values
            created = {
                found[0]
                for found in conn.execute(
                    f"INSERT INTO ledger ({INSERT_COLUMNS}) "
                    f"SELECT {_INSERT_SELECT} FROM (VALUES {_values(len(chunk), 14)}) "
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


ClaimItem = tuple[str, int, float, float | None]
"""id, fence, now, and the row's ``created_at`` when the caller knows the row (then only the id
comes back; ``created_at`` tells the row from an older life of its id at the same fence)."""

ClaimResult = Obligation | bool | None
"""The row after the claim (unknown rows), ``True`` (a known row was claimed), ``None``."""

HeldItem = tuple[
    str,
    int,
    float,
    str | None,
    float | None,
    int,
    str | None,
    str,
    str,
    str | None,
    int,
    float | None,
]
"""id, fence, now, new state (``None``: stays attempting), next_attempt_at, penalty,
last_error, the delivered ref's channel, message id and thread, whether there is a ref (1/0),
the row's ``created_at`` when the caller knows the row."""

HeldResult = Obligation | tuple[str | None, int, str] | None
"""The row after the change (unknown rows), ``(last_error, how many refs, delivered as JSON)``
(known rows), ``None``."""

_NULL_TEXT = 0
"""Bound in place of ``None`` for a text column, and read back as ``NULL`` by
``NULLIF(value, 0)``: an integer is never equal to a text (SQLite compares a number as less
than any text, ``'0'`` included), so no string the ledger writes turns into ``NULL``. sqlite3
binds ``None`` through its adapter lookup, which builds and clears an ``AttributeError`` each
time (about 3,300 instructions a value, five a reply on ``submit``'s path; ADR 0170), and an
integer directly."""
_NULL_REAL = ""
"""The same for a real column (``next_attempt_at``), read back by ``NULLIF(value, '')``: no
number equals a text. (``0`` would not do: ``0.0 = 0``.)"""

# The new row's columns in ``INSERT_COLUMNS`` order, the thread and the reply-to (5 and 6)
# given back their NULLs.
_INSERT_SELECT = ", ".join(
    f"NULLIF(column{n}, {_NULL_TEXT})" if n in (5, 6) else f"column{n}" for n in range(1, 15)
)

_HELD_SET = (
    "UPDATE ledger SET updated_at = c.column3, "
    "state = COALESCE(NULLIF(c.column4, 0), state), "
    "next_attempt_at = CASE WHEN c.column4 = 0 THEN next_attempt_at "
    "ELSE NULLIF(c.column5, '') END, "
    "penalty = CASE WHEN c.column4 = 0 THEN penalty ELSE c.column6 END, "
    "last_error = COALESCE(NULLIF(c.column7, 0), last_error), "
    "delivered = CASE WHEN c.column11 = 0 THEN delivered ELSE json_insert("
    "CASE WHEN delivered = '' THEN '[]' ELSE delivered END, '$[#]', "
    "json_array(c.column8, c.column9, NULLIF(c.column10, 0))) END "
)


def _split(
    chunk: list[tuple[int, Any]], known: Callable[[Any], bool]
) -> tuple[list[tuple[int, Any]], list[tuple[int, Any]]]:
    yes = [indexed for indexed in chunk if known(indexed[1])]
    no = [indexed for indexed in chunk if not known(indexed[1])]
    return yes, no


class MergedClaims:
    """``claim`` for many rows: one compare-and-swap ``UPDATE … FROM (VALUES (id, fence, now))``.

    A row is claimed when it still has the fence its claimer read, is open, and its owner is
    unset, this process or dead (re-checked inside the statement: first against ``dead``, a
    JSON list of owners already found dead, which stay dead, then ``owner_alive``; so a page
    of a dead owner's rows calls back into Python, and takes the GIL, for none of them). For a row
    the caller knows (read at that fence, not ``attempting``: such a row cannot change without
    its fence moving) only the id comes back; the caller applies the claim's changes itself.
    """

    def __init__(
        self, owner: str, forget_live: Callable[[], None], dead: Callable[[], str] = lambda: "[]"
    ) -> None:
        self.owner = owner
        self._forget_live = forget_live
        self._dead = dead

    def run_many(self, conn: sqlite3.Connection, items: Sequence[ClaimItem]) -> list[ClaimResult]:
        results: list[ClaimResult] = [None] * len(items)
        for chunk in rounds(items, lambda item: item[0]):
            for part, full in zip(
                _split(chunk, lambda item: item[3] is not None), (False, True), strict=True
            ):
                if not part:
                    continue
                self._forget_live()
                params: list[Any] = [self.owner]
                for _, item in part:
                    params += item[:3] if full else item
                params += (self.owner, self._dead())
                statement = (
                    "UPDATE ledger SET state = 'attempting', owner = ?, fence = fence + 1, "
                    "attempts = attempts + 1, resends = resends + "
                    "CASE WHEN attempts > 0 AND NOT penalty THEN 1 ELSE 0 END, "
                    "penalty = 0, next_attempt_at = NULL, updated_at = c.column3 "
                    f"FROM (VALUES {_values(len(part), 3 if full else 4)}) AS c "
                    "WHERE ledger.id = c.column1 AND ledger.fence = c.column2 "
                    f"{'' if full else 'AND ledger.created_at = c.column4 '}"
                    f"AND ledger.state IN {_OPEN} AND (ledger.owner IS NULL "
                    "OR ledger.owner = ? OR ledger.owner IN (SELECT value FROM json_each(?)) "
                    "OR NOT owner_alive(ledger.owner))"
                )
                if not full:  # known rows: only which were claimed comes back
                    ids = _changed_ids(conn, statement, params, len(part))
                    for index, item in part:
                        if ids is None or item[0] in ids:
                            results[index] = True
                    continue
                claimed = {row[0]: row for row in conn.execute(f"{statement} {_RETURNING}", params)}
                for index, item in part:
                    row = claimed.get(item[0])
                    if row is not None:
                        results[index] = to_obligation(row)
        return results


class MergedHeldUpdates:
    """``progress`` and ``settle`` for many rows: one ``UPDATE … FROM (VALUES …)`` conditioned,
    row by row, on this owner, the fence it holds and ``attempting``. For a row the caller
    knows (as claimed: nothing but these updates changes it at that fence) only the columns an
    update appends to come back."""

    def __init__(self, owner: str) -> None:
        self.owner = owner

    def run_many(self, conn: sqlite3.Connection, items: Sequence[HeldItem]) -> list[HeldResult]:
        results: list[HeldResult] = [None] * len(items)
        for chunk in rounds(items, lambda item: item[0]):
            for part, full in zip(
                _split(chunk, lambda item: item[11] is not None), (False, True), strict=True
            ):
                if not part:
                    continue
                params: list[Any] = []
                for _, item in part:
                    # no NULL bound (see ``_NULL_TEXT``): the state, the time of the next
                    # attempt, the error and the ref's thread, each as its stand-in
                    state, next_attempt_at, error, thread = item[3], item[4], item[6], item[9]
                    params += (
                        *item[:3],
                        _NULL_TEXT if state is None else state,
                        _NULL_REAL if next_attempt_at is None else next_attempt_at,
                        item[5],
                        _NULL_TEXT if error is None else error,
                        item[7],
                        item[8],
                        _NULL_TEXT if thread is None else thread,
                        item[10],
                    )
                    if not full:
                        params.append(item[11])
                params.append(self.owner)
                returning = _RETURNING if full else _RETURNING_APPENDED
                changed = {
                    row[0]: row
                    for row in conn.execute(
                        f"{_HELD_SET} FROM (VALUES {_values(len(part), 11 if full else 12)}) "
                        "AS c WHERE ledger.id = c.column1 AND ledger.fence = c.column2 "
                        f"{'' if full else 'AND ledger.created_at = c.column12 '}"
                        f"AND ledger.owner = ? AND ledger.state = 'attempting' {returning}",
                        params,
                    )
                }
                for index, item in part:
                    row = changed.get(item[0])
                    if row is not None:
                        results[index] = to_obligation(row) if full else (row[1], row[2], row[3])
        return results


DeliveredItem = tuple[str, int, float, str, str, str | None, float | None]
"""id, fence, now, the last part's ref (channel, message id, thread), the row's ``created_at``
when the caller knows the row (``None``: any row of that id)."""


class MergedDelivered:
    """``settle(state=DELIVERED, ref=…)`` for many rows, with only whether each settled back:
    a batched sweep's settles (``mark_delivered``), a delivered row being final. The conditions
    and the changes are the held update's for that settle, row by row (this owner, the fence it
    holds, ``attempting``; ``next_attempt_at`` cleared, ``penalty`` off, ``last_error`` kept,
    the ref appended), in a statement that binds seven values a row instead of twelve and tells
    only whether each row settled (``_changed_ids``).

    No ``NULL`` is bound a row: sqlite3 binds ``None`` through its adapter lookup (two failed
    attribute lookups, about 0.6 µs a value against 0.1 µs for a string), so refs without a
    thread go in a statement of their own that writes the thread as a literal ``NULL``, and
    rows not known to the caller (no ``created_at``) in one without that condition."""

    def __init__(self, owner: str) -> None:
        self.owner = owner

    def run_many(self, conn: sqlite3.Connection, items: Sequence[DeliveredItem]) -> list[bool]:
        results = [False] * len(items)
        for chunk in rounds(items, lambda item: item[0]):
            groups: dict[tuple[bool, bool], list[tuple[int, DeliveredItem]]] = {}
            for indexed in chunk:
                item = indexed[1]
                groups.setdefault((item[5] is None, item[6] is None), []).append(indexed)
            for (threadless, unknown), part in groups.items():
                # the values bound a row: id, fence, now, channel, message id, then the thread
                # and the row's created_at, each only when there is one
                width = 7 - threadless - unknown
                params: list[Any] = []
                if width == 7:
                    for _, item in part:
                        params += item
                elif unknown:
                    for _, item in part:
                        params += item[:width]
                else:  # a known row's ref without a thread
                    for _, item in part:
                        params += item[:5]
                        params.append(item[6])
                params.append(self.owner)
                thread = "NULL" if threadless else "c.column6"
                created = "" if unknown else f"AND ledger.created_at = c.column{7 - threadless} "
                ref = f"json_array(c.column4, c.column5, {thread})"
                settled = _changed_ids(
                    conn,
                    "UPDATE ledger SET updated_at = c.column3, state = 'delivered', "
                    "next_attempt_at = NULL, penalty = 0, delivered = CASE WHEN delivered = '' "
                    f"THEN '[' || {ref} || ']' ELSE json_insert(delivered, '$[#]', {ref}) END "
                    f"FROM (VALUES {_values(len(part), width)}) AS c "
                    f"WHERE ledger.id = c.column1 AND ledger.fence = c.column2 {created}"
                    "AND ledger.owner = ? AND ledger.state = 'attempting'",
                    params,
                    len(part),
                )
                for index, item in part:
                    results[index] = settled is None or item[0] in settled
        return results
