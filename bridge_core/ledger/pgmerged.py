"""The PostgreSQL ledger's hot statements, gathered from concurrent callers into one transaction.

``Gathered`` collects the items callers queue within one event loop iteration; the first caller
of the iteration runs them all as a few multi-row statements in one transaction on one pooled
connection (one commit, one WAL flush, instead of one per statement), while the other callers
wait for their results. The statements keep the single-row conditions row by row: a claim is a
compare-and-swap on the fence read, re-checking the owner's lease with the database's clock;
held updates need this owner, the fence and ``attempting``. An id twice in one gathering goes
in a later statement of the same transaction. When a gathering fails, each item runs again in
a transaction of its own, so one bad item fails alone.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Generic, TypeVar

import anyio
import anyio.lowlevel
import psycopg

from bridge_core.ledger.model import Obligation
from bridge_core.ledger.rows import COLUMNS, INSERT_COLUMNS, insert_params, to_obligation
from bridge_core.ledger.sqlmerged import CHUNK, rounds

__all__ = [
    "PG_CHUNK",
    "DeliveredItem",
    "Gathered",
    "claim_known_many",
    "claim_many",
    "delivered_many",
    "held_many",
    "record_many",
]

# Rows per statement of a sweep's page claim and settles (``by_key``): each statement joins its
# VALUES to the table, and with a page's 400 rows the planner (its statistics stale after the
# sweep's claims) scanned the whole table per statement, or looped the VALUES over every row
# (7.8 s for 400 rows of 20,000). These statements also name their ids in ``id = ANY(...)``,
# so the primary key drives them. Concurrent single calls keep their statements as they were.
PG_CHUNK = 64

I = TypeVar("I")  # noqa: E741
R = TypeVar("R")

Connection = psycopg.AsyncConnection[Any]
RunMany = Callable[[Connection, list[I]], Awaitable[list[R]]]


class _Call(Generic[R]):
    """One ``call_many``'s items in a gathering: their results or errors, by position, and one
    event for all of them (an event and a wake-up per item was a twentieth of a sweep's loop)."""

    __slots__ = ("done", "errors", "results")

    def __init__(self, count: int) -> None:
        self.done = anyio.Event()
        self.results: list[R | None] = [None] * count
        self.errors: list[BaseException | None] = [None] * count


class Gathered(Generic[I, R]):
    """One kind of statement, run for everything queued in one loop iteration at once."""

    def __init__(
        self,
        run_many: RunMany[I, R],
        connection: Callable[[], AbstractAsyncContextManager[Connection]],
        *,
        key: Callable[[I], str] | None = None,
        size: int = CHUNK,
    ) -> None:
        self._run_many = run_many
        self._connection = connection
        # ``key`` (the item's row id) marks a kind whose gathering of distinct rows, at most
        # one statement's worth, runs as one autocommit statement (see ``_transaction``).
        self._key = key
        self._size = size
        self._queued: list[tuple[I, _Call[R], int]] = []

    async def call(self, item: I) -> R:
        return (await self.call_many((item,)))[0]

    async def call_many(self, items: Sequence[I]) -> list[R]:
        """Queue ``items`` together (they share the gathering's statements); their results."""
        if not items:
            return []
        call: _Call[R] = _Call(len(items))
        lead = not self._queued
        self._queued += [(item, call, position) for position, item in enumerate(items)]
        if lead:
            # This caller leads: once the tasks resumed in this iteration have queued theirs,
            # it runs them all. Shielded, so the others are never left waiting on a cancelled
            # leader; the statements are short.
            with anyio.CancelScope(shield=True):
                await anyio.lowlevel.checkpoint()
                batch, self._queued = self._queued, []
                await self._run(batch)
        await call.done.wait()
        for error in call.errors:
            if error is not None:
                raise error
        return call.results  # type: ignore[return-value]

    async def _run(self, batch: list[tuple[I, _Call[R], int]]) -> None:
        try:
            try:
                results = await self._transaction([item for item, _, _ in batch])
                for (_, call, position), result in zip(batch, results, strict=True):
                    call.results[position] = result
            except Exception:
                if len(batch) == 1:
                    raise
                for item, call, position in batch:  # find the item that fails; others still run
                    try:
                        call.results[position] = (await self._transaction([item]))[0]
                    except Exception as error:
                        call.errors[position] = error
        except Exception as error:
            for _, call, position in batch:
                call.errors[position] = error
        finally:
            for call in {id(call): call for _, call, _ in batch}.values():
                call.done.set()

    async def _transaction(self, items: list[I]) -> list[R]:
        if (
            self._key is not None
            and len(items) <= self._size
            and len({*map(self._key, items)}) == len(items)
        ):
            # One statement (distinct rows, one chunk): on an autocommit connection it is its
            # own transaction, atomic and committed with one WAL flush as before, in one round
            # trip instead of three (BEGIN, the statement, COMMIT). If it fails nothing of it
            # is kept, so running its items again one by one is as safe as after a rollback.
            async with self._connection() as conn:
                return await self._run_many(conn, items)
        async with self._connection() as conn, conn.transaction():
            return await self._run_many(conn, items)


async def _rows(conn: Connection, sql: str, params: Sequence[Any]) -> AsyncIterator[Any]:
    cursor = await conn.execute(sql, params)
    for row in await cursor.fetchall():
        yield row


def _values(rows: int, width: int, casts: Sequence[str]) -> str:
    row = "(" + ", ".join(f"%s::{cast}" for cast in casts[:width]) + ")"
    return ", ".join([row] * rows)


async def record_many(
    conn: Connection, items: list[Obligation], *, table: str, owner: str
) -> list[tuple[Obligation, bool]]:
    """``INSERT … ON CONFLICT (id) DO NOTHING RETURNING id`` for many new rows (each as built:
    ``pending``, or already claimed by this owner, ADR 0121); the rows of ids that existed are
    read back as they are."""
    results: list[tuple[Obligation, bool] | None] = [None] * len(items)
    casts = ("text",) * 8 + ("text", "float8", "float8", "text", "int8", "int4")
    for chunk in rounds(items, lambda fresh: fresh.id):
        while chunk:  # again for ids recorded and purged by others between the two statements
            params: list[Any] = []
            for _, fresh in chunk:
                params += insert_params(fresh, owner=owner)
            created = {
                row[0]
                async for row in _rows(
                    conn,
                    f"INSERT INTO {table} ({INSERT_COLUMNS}) "
                    f"SELECT * FROM (VALUES {_values(len(chunk), 14, casts)}) AS c "
                    "ON CONFLICT (id) DO NOTHING RETURNING id",
                    params,
                )
            }
            existing = [fresh.id for _, fresh in chunk if fresh.id not in created]
            found: dict[str, Obligation] = {}
            if existing:
                found = {
                    row[0]: to_obligation(row)
                    async for row in _rows(
                        conn, f"SELECT {COLUMNS} FROM {table} WHERE id = ANY(%s)", (existing,)
                    )
                }
            for index, fresh in chunk:
                if fresh.id in created:
                    results[index] = (fresh, True)
                elif fresh.id in found:
                    results[index] = (found[fresh.id], False)
            chunk = [(index, fresh) for index, fresh in chunk if results[index] is None]
    return [result for result in results if result is not None]


@functools.cache
def _qualified_columns(table: str) -> str:
    """``COLUMNS`` qualified by ``table``, for a ``RETURNING`` after an ``UPDATE … FROM``."""
    return ", ".join(f"{table}.{name.strip()}" for name in COLUMNS.split(","))


def _claim_changes(table: str) -> str:
    """A claim's changes (owner ``%s``, the claim's time ``c.now``), as
    ``rows.claimed_row`` applies them to a row as read."""
    return (
        f"state = 'attempting', owner = %s, fence = {table}.fence + 1, "
        f"attempts = {table}.attempts + 1, resends = {table}.resends + CASE WHEN "
        f"{table}.attempts > 0 AND NOT {table}.penalty THEN 1 ELSE 0 END, "
        "penalty = FALSE, next_attempt_at = NULL, updated_at = c.now"
    )


def _claimable(table: str, live: str) -> str:
    """A claim's condition besides the fence: an open state, and no live owner but this one
    (``%s``)."""
    return (
        f"{table}.state IN ('pending', 'attempting', 'failed') "
        f"AND ({table}.owner IS NULL OR {table}.owner = %s OR {table}.owner NOT IN ({live}))"
    )


async def claim_many(
    conn: Connection,
    items: list[tuple[str, int, float]],
    *,
    table: str,
    owner: str,
    live: str,
    by_key: bool = False,
) -> list[Obligation | None]:
    """The claim's compare-and-swap for many rows: one ``UPDATE … FROM (VALUES …)``, or for a
    sweep's page (``by_key``) one ``UPDATE … FROM unnest(…)`` of a column array each."""
    results: list[Obligation | None] = [None] * len(items)
    returning = _qualified_columns(table)
    chunks = list(rounds(items, lambda item: item[0], size=PG_CHUNK if by_key else CHUNK))
    statements: list[tuple[str, list[Any]]] = []
    for chunk in chunks:
        if by_key:
            statements.append(
                (
                    _keyed_claim(table, live, returning),
                    [owner, *_keyed(chunk, 3), owner],
                )
            )
            continue
        params: list[Any] = [owner]
        for _, item in chunk:
            params += item
        params.append(owner)
        statements.append(
            (
                f"UPDATE {table} SET {_claim_changes(table)} "
                f"FROM (VALUES {_values(len(chunk), 3, ('text', 'int8', 'float8'))}) "
                "AS c (id, fence, now) "
                f"WHERE {table}.id = c.id AND {table}.fence = c.fence "
                f"AND {_claimable(table, live)} RETURNING {returning}",
                params,
            )
        )
    for chunk, found in zip(chunks, await _run_all(conn, statements), strict=True):
        claimed = {row[0]: row for row in found}
        for index, (obligation_id, _fence, _now) in chunk:
            row = claimed.get(obligation_id)
            results[index] = None if row is None else to_obligation(row)
    return results


def _keyed(chunk: Sequence[tuple[int, tuple[Any, ...]]], width: int) -> list[list[Any]]:
    """A chunk's items as one list per column, each bound as one array parameter, and the ids
    once more for ``id = ANY(…)``, which keeps the primary key driving the statement (see
    ``PG_CHUNK``). The statement's text is then the same whatever the chunk's size, so psycopg
    converts it once (its ``%s`` split is cached) instead of at every call. The arrays go in
    binary (``%b``): psycopg dumps a list element by element, a third as fast in text (quoted
    and escaped), and binary floats arrive exact."""
    columns = [[item[column] for _, item in chunk] for column in range(width)]
    return [*columns, columns[0]]


@functools.cache
def _keyed_claim(table: str, live: str, returning: str) -> str:
    """A sweep page's claim of rows it did not read as they are: the rows come back whole."""
    return (
        f"UPDATE {table} SET {_claim_changes(table)} "
        "FROM unnest(%b::text[], %b::int8[], %b::float8[]) AS c (id, fence, now) "
        f"WHERE {table}.id = ANY(%b) AND {table}.id = c.id AND {table}.fence = c.fence "
        f"AND {_claimable(table, live)} RETURNING {returning}"
    )


KnownClaim = tuple[str, int, float, float]
"""id, fence, now, and the ``created_at`` of the row as read (a sweep's page)."""


async def claim_known_many(
    conn: Connection, items: list[KnownClaim], *, table: str, owner: str, live: str
) -> list[bool]:
    """``claim_many``'s compare-and-swap for rows the caller read at that fence and not
    ``attempting`` (a sweep's page): such a row cannot change without its fence moving, so
    only the ids claimed come back and the caller applies the claim's changes to the row as
    read. ``created_at`` must match too: it tells the row from an older life of its id (purged
    and recorded again) at the same fence. Statements of ``PG_CHUNK`` rows, each id once."""
    chunks = list(rounds(items, lambda item: item[0], size=PG_CHUNK))
    sql = _known_claim(table, live)
    statements = [(sql, [owner, *_keyed(chunk, 4), owner]) for chunk in chunks]
    return await _matched(conn, statements, chunks, len(items))


@functools.cache
def _known_claim(table: str, live: str) -> str:
    return (
        f"UPDATE {table} SET {_claim_changes(table)} "
        "FROM unnest(%b::text[], %b::int8[], %b::float8[], %b::float8[]) "
        "AS c (id, fence, now, created_at) "
        f"WHERE {table}.id = ANY(%b) AND {table}.id = c.id AND {table}.fence = c.fence "
        f"AND {table}.created_at = c.created_at "
        f"AND {_claimable(table, live)} RETURNING {table}.id"
    )


async def _matched(
    conn: Connection,
    statements: list[tuple[str, list[Any]]],
    chunks: list[list[tuple[int, tuple[Any, ...]]]],
    count: int,
) -> list[bool]:
    """Run ``statements`` (one a chunk, each returning the ids it changed) and say, for each
    of the ``count`` items in their original order, whether its row was changed."""
    results = [False] * count
    for chunk, found in zip(chunks, await _run_all(conn, statements), strict=True):
        changed = {row[0] for row in found}
        for index, item in chunk:
            results[index] = item[0] in changed
    return results


async def _run_all(conn: Connection, statements: list[tuple[str, list[Any]]]) -> list[list[Any]]:
    """Each statement's rows, in order. Several (a sweep's half page in statements of
    ``PG_CHUNK`` rows, inside the gathering's transaction) are sent in one pipeline: the same
    statements, run by the server in the same order in the same transaction, without a round
    trip each; the first that fails aborts the rest and raises here, as it did one by one."""
    if len(statements) == 1:
        cursor = await conn.execute(*statements[0])
        return [await cursor.fetchall()]
    async with conn.pipeline():
        cursors = [await conn.execute(sql, params) for sql, params in statements]
        return [await cursor.fetchall() for cursor in cursors]


HeldItem = tuple[str, int, float, str | None, float | None, bool, str | None, str]
"""id, fence, now, new state (``None``: stays attempting), next_attempt_at, penalty, last_error,
refs to append as a JSON array (``'[]'``: none)."""


async def held_many(
    conn: Connection, items: list[HeldItem], *, table: str, owner: str
) -> list[Obligation | None]:
    """``progress`` and ``settle`` for many rows, conditioned on owner, fence, ``attempting``."""
    results: list[Obligation | None] = [None] * len(items)
    returning = _qualified_columns(table)
    casts = ("text", "int8", "float8", "text", "float8", "bool", "text", "jsonb")
    for chunk in rounds(items, lambda item: item[0], size=CHUNK):
        params: list[Any] = []
        for _, item in chunk:
            params += item
        params.append(owner)
        changed = {
            row[0]: row
            async for row in _rows(
                conn,
                f"UPDATE {table} SET updated_at = c.now, "
                f"state = COALESCE(c.state, {table}.state), "
                f"next_attempt_at = CASE WHEN c.state IS NULL THEN {table}.next_attempt_at "
                "ELSE c.next END, "
                f"penalty = CASE WHEN c.state IS NULL THEN {table}.penalty ELSE c.penalty END, "
                f"last_error = COALESCE(c.error, {table}.last_error), "
                f"delivered = {table}.delivered || c.refs "
                f"FROM (VALUES {_values(len(chunk), 8, casts)}) "
                "AS c (id, fence, now, state, next, penalty, error, refs) "
                f"WHERE {table}.id = c.id AND {table}.fence = c.fence "
                f"AND {table}.owner = %s "
                f"AND {table}.state = 'attempting' RETURNING {returning}",
                params,
            )
        }
        for index, item in chunk:
            row = changed.get(item[0])
            results[index] = None if row is None else to_obligation(row)
    return results


DeliveredItem = tuple[str, int, float, str, str, str | None]
"""id, fence, now, and the last part's ref: channel, message id, thread."""


async def delivered_many(
    conn: Connection, items: list[DeliveredItem], *, table: str, owner: str
) -> list[bool]:
    """A sweep's delivered settles (``mark_delivered``): ``held_many``'s conditions and changes
    for ``settle(state=DELIVERED, ref=…)``, row by row (this owner, the fence it holds,
    ``attempting``; ``next_attempt_at`` cleared, ``penalty`` off, ``last_error`` kept, the ref
    appended), in statements of ``PG_CHUNK`` rows, each id once. Only the ids come back (a
    delivered row is final: nothing of it is kept), and the ref is built by the statement, not
    encoded to JSON a row here."""
    chunks = list(rounds(items, lambda item: item[0], size=PG_CHUNK))
    sql = _delivered(table)
    statements = [(sql, [*_keyed(chunk, 6), owner]) for chunk in chunks]
    return await _matched(conn, statements, chunks, len(items))


@functools.cache
def _delivered(table: str) -> str:
    return (
        f"UPDATE {table} SET updated_at = c.now, state = 'delivered', "
        "next_attempt_at = NULL, penalty = FALSE, "
        f"delivered = {table}.delivered || "
        "jsonb_build_array(jsonb_build_array(c.channel, c.message, c.thread)) "
        "FROM unnest(%b::text[], %b::int8[], %b::float8[], "
        "%b::text[], %b::text[], %b::text[]) "
        "AS c (id, fence, now, channel, message, thread) "
        f"WHERE {table}.id = ANY(%b) AND {table}.id = c.id AND {table}.fence = c.fence "
        f"AND {table}.owner = %s AND {table}.state = 'attempting' RETURNING {table}.id"
    )
