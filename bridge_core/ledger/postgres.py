"""The shared ledger: PostgreSQL through psycopg 3 (async), for gateways on several hosts.

An owner is host, process and start time with a lease in ``<prefix>owners``, renewed by
``renew()`` (``DeliveryLedger.run`` calls it every sweep) and always compared with the
database's clock (``clock_timestamp()``), never a host's. A row is claimable when its owner is
this process, unset, or has no live lease; the claim re-checks that inside the same
compare-and-swap that bumps the fence, so a live owner's rows are never taken and two claimers
never both win. A clean ``aclose`` drops the lease at once so others may take over.

Every connection sets ``idle_in_transaction_session_timeout`` to the lease: a process that stalls
inside a transaction (frozen, swapped out) would otherwise keep its row locks, and the processes
that take over its rows once its lease lapses would wait on those locks for as long as it stalls.
Our transactions are a few statements back to back, so only such a stall ever reaches the limit;
the server then ends that session, and the stalled process's next call on it fails and the
connection is replaced.
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator, Collection, Sequence
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import anyio
import psycopg

from bridge_core.ledger.model import LedgerError, Obligation, Reply, State
from bridge_core.ledger.owner import current_owner
from bridge_core.ledger.pgmerged import (
    PG_CHUNK,
    DeliveredItem,
    Gathered,
    HeldItem,
    KnownClaim,
    claim_known_many,
    claim_many,
    delivered_many,
    held_many,
    record_many,
)
from bridge_core.ledger.rows import (
    COLUMNS,
    claimed_row,
    encode_refs,
    filters_sql,
    new_row,
    scope_where,
    to_obligation,
)
from bridge_core.ledger.store import Scope
from bridge_core.provider import MessageRef

__all__ = ["PostgresLedgerStore", "redact_url"]

_PREFIX = re.compile(r"^[a-z_][a-z0-9_]{0,40}$")


def _first(item: tuple[Any, ...]) -> str:
    """A gathered item's row id."""
    return str(item[0])


_KNOWN_LIMIT = 50_000


def redact_url(url: str) -> str:
    """The URL without its password, for messages (a URL that cannot be parsed is not shown: it
    may hold one, and the message that names it must not fail)."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:  # an unparseable URL: "postgresql://[bad"
        return "postgresql://(a URL that cannot be parsed)"
    if password is None:
        return url
    netloc = parts.netloc.replace(f":{password}@", ":***@")
    return urlunsplit(parts._replace(netloc=netloc))


class PostgresLedgerStore:
    """Rows in ``<prefix>ledger``, leases in ``<prefix>owners``, providers' values in
    ``<prefix>kv``. ``connections`` concurrent connections let PostgreSQL group their commits."""

    def __init__(
        self,
        url: str,
        *,
        owner: str | None = None,
        table_prefix: str = "bridge_",
        lease: float = 60.0,
        connections: int = 8,
    ) -> None:
        if not _PREFIX.match(table_prefix):
            raise ValueError(
                f"table_prefix {table_prefix!r} must be lowercase letters, digits and _"
            )
        if lease <= 0:
            raise ValueError(f"lease must be positive, got {lease}")
        self.url = url
        self.prefix = table_prefix
        self.lease = lease
        self._stall_limit_ms = max(1000, round(lease * 1000))
        self._owner = owner if owner is not None else str(current_owner())
        self.connections = connections
        self._idle: list[psycopg.AsyncConnection[Any]] = []
        self._free: anyio.Semaphore | None = None
        self._clock_offset: float | None = None  # the database's epoch minus time.monotonic()
        self._clock_samples: list[tuple[float, float]] = []  # (round trip, offset), recent
        p = table_prefix
        self._t = f"{p}ledger"
        self._owners = f"{p}owners"
        self._live = f"SELECT owner FROM {p}owners WHERE lease_until >= clock_timestamp()"
        self._select = f"SELECT {COLUMNS} FROM {p}ledger"
        # record, claim and progress/settle of concurrent callers share one transaction.
        self._records: Gathered[Obligation, tuple[Obligation, bool]] = Gathered(
            lambda conn, items: record_many(conn, items, table=self._t, owner=self._owner),
            self.connection,
        )
        self._claims: Gathered[tuple[str, int, float], Obligation | None] = Gathered(
            lambda conn, items: claim_many(
                conn, items, table=self._t, owner=self._owner, live=self._live
            ),
            self.connection,
            key=_first,
        )
        # A sweep's page: its own statements, driven by the primary key (pgmerged.PG_CHUNK)
        self._page_claims: Gathered[tuple[str, int, float], Obligation | None] = Gathered(
            lambda conn, items: claim_many(
                conn, items, table=self._t, owner=self._owner, live=self._live, by_key=True
            ),
            self.connection,
            key=_first,
            size=PG_CHUNK,
        )
        self._held: Gathered[HeldItem, Obligation | None] = Gathered(
            lambda conn, items: held_many(conn, items, table=self._t, owner=self._owner),
            self.connection,
            key=_first,
        )
        # the same for rows the page read (``_known``): only the ids claimed come back
        self._page_known_claims: Gathered[KnownClaim, bool] = Gathered(
            lambda conn, items: claim_known_many(
                conn, items, table=self._t, owner=self._owner, live=self._live
            ),
            self.connection,
            key=_first,
            size=PG_CHUNK,
        )
        # Rows a sweep's page read pending or failed, by id: claimed at the fence read, they
        # are built here from the row as read (event loop only; bounded, oldest dropped).
        self._known: dict[str, Obligation] = {}
        # its settles, only whether each settled back (a delivered row is final)
        self._page_delivered: Gathered[DeliveredItem, bool] = Gathered(
            lambda conn, items: delivered_many(conn, items, table=self._t, owner=self._owner),
            self.connection,
            key=_first,
            size=PG_CHUNK,
        )

    @property
    def owner(self) -> str:
        return self._owner

    def now(self) -> float:
        """The database's clock, read at each lease renewal and carried forward between them
        by this host's monotonic clock (so no query per call, and a host's wall clock, however
        wrong or stepped, never enters a row)."""
        if self._clock_offset is None:
            raise LedgerError("the PostgreSQL ledger store is not open: call open() first")
        return time.monotonic() + self._clock_offset

    @property
    def renew_interval(self) -> float | None:
        # Four renewals per lease: a lease lapses only after several missed renewals.
        return self.lease / 4

    @property
    def location(self) -> str:
        return redact_url(self.url)

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        if self._free is None:
            raise LedgerError("the PostgreSQL ledger store is not open: call open() first")
        async with self._free:
            conn = self._idle.pop()
            try:
                yield conn
            finally:
                if conn.closed:
                    # Shielded: a caller cancelled mid-query (psycopg then closes the connection)
                    # must not take the pool's connection with it; a slot whose connection never
                    # came back left the pool one short and a later caller popping an empty list.
                    with anyio.move_on_after(10, shield=True):
                        try:
                            conn = await self._connect()
                        except LedgerError:
                            pass  # the closed one goes back: its next user fails, and replaces it
                self._idle.append(conn)

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        try:
            return await psycopg.AsyncConnection.connect(
                self.url,
                autocommit=True,
                options=f"-c idle_in_transaction_session_timeout={self._stall_limit_ms}",
            )
        except psycopg.Error as error:
            raise LedgerError(
                f"cannot connect to the ledger database {self.location}: {error}"
            ) from error

    async def open(self) -> None:
        self._idle = [await self._connect() for _ in range(self.connections)]
        self._free = anyio.Semaphore(self.connections)
        p = self.prefix
        async with self.connection() as conn, conn.transaction():
            # Concurrent CREATE ... IF NOT EXISTS can still collide: serialise them.
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (p + "ledger",))
            await conn.execute(
                f"""
                CREATE TABLE IF NOT EXISTS {p}ledger (
                    id TEXT PRIMARY KEY,
                    profile TEXT NOT NULL,
                    platform TEXT NOT NULL,
                    channel TEXT NOT NULL,
                    thread TEXT,
                    reply_to TEXT,
                    text TEXT NOT NULL,
                    chunks TEXT NOT NULL DEFAULT '',
                    state TEXT NOT NULL,
                    attempts INTEGER NOT NULL DEFAULT 0,
                    resends INTEGER NOT NULL DEFAULT 0,
                    fence BIGINT NOT NULL DEFAULT 0,
                    owner TEXT,
                    created_at DOUBLE PRECISION NOT NULL,
                    updated_at DOUBLE PRECISION NOT NULL,
                    next_attempt_at DOUBLE PRECISION,
                    last_error TEXT,
                    penalty BOOLEAN NOT NULL DEFAULT FALSE,
                    delivered JSONB NOT NULL DEFAULT '[]'
                )"""
            )
            await conn.execute(
                f"CREATE INDEX IF NOT EXISTS {p}ledger_open ON {p}ledger (created_at, id) "
                "WHERE state IN ('pending', 'attempting', 'failed')"
            )
            # Only delivered rows, for pruning: claims and failed sends change no entry of it.
            await conn.execute(f"DROP INDEX IF EXISTS {p}ledger_state_updated")
            await conn.execute(
                f"CREATE INDEX IF NOT EXISTS {p}ledger_delivered "
                f"ON {p}ledger (updated_at) WHERE state = 'delivered'"
            )
            await conn.execute(
                f"CREATE TABLE IF NOT EXISTS {p}owners "
                "(owner TEXT PRIMARY KEY, lease_until TIMESTAMPTZ NOT NULL)"
            )
            await conn.execute(
                f"CREATE TABLE IF NOT EXISTS {p}kv (namespace TEXT NOT NULL, key TEXT NOT NULL, "
                "value BYTEA NOT NULL, PRIMARY KEY (namespace, key))"
            )
        await self.renew()

    async def renew(self) -> None:
        async with self.connection() as conn:
            sent = time.monotonic()
            cursor = await conn.execute(
                f"INSERT INTO {self._owners} (owner, lease_until) "
                "VALUES (%s, clock_timestamp() + make_interval(secs => %s)) "
                "ON CONFLICT (owner) DO UPDATE SET lease_until = excluded.lease_until "
                "RETURNING extract(epoch from clock_timestamp())::float8",
                (self._owner, self.lease),
            )
            found = await cursor.fetchone()
            received = time.monotonic()
        assert found is not None
        # The server read its clock between sending and receiving: the middle is off by at most
        # half the round trip, so keep the reading of the quickest recent round trip.
        sample = (received - sent, float(found[0]) - (sent + received) / 2)
        self._clock_samples = [*self._clock_samples[-15:], sample]
        self._clock_offset = min(self._clock_samples)[1]

    async def dead_owners(self) -> set[str]:
        async with self.connection() as conn:
            cursor = await conn.execute(
                f"SELECT owner FROM {self._owners} WHERE lease_until < clock_timestamp()"
            )
            return {owner for (owner,) in await cursor.fetchall()}

    async def aclose(self) -> None:
        if self._free is None:
            return
        try:
            async with self.connection() as conn:
                await conn.execute(f"DELETE FROM {self._owners} WHERE owner = %s", (self._owner,))
        except psycopg.Error:
            pass  # the lease then simply expires: others take over a little later
        finally:
            for conn in self._idle:
                await conn.close()
            self._idle = []
            self._free = None

    async def _one(self, sql: str, params: Any) -> Any:
        async with self.connection() as conn:
            cursor = await conn.execute(sql, params)
            return await cursor.fetchone()

    async def record(
        self, reply: Reply, *, now: float, claimed: bool = False
    ) -> tuple[Obligation, bool]:
        # The new row is built here rather than read back.
        return await self._records.call(new_row(reply, owner=self._owner, now=now, claimed=claimed))

    async def get(self, obligation_id: str) -> Obligation | None:
        found = await self._one(f"{self._select} WHERE id = %s", (obligation_id,))
        return None if found is None else to_obligation(found)

    async def candidates(self, scope: Scope, *, now: float) -> list[Obligation]:
        where, params = scope_where(
            scope,
            now=now,
            me=self._owner,
            dead_sql=f"owner IS NULL OR owner NOT IN ({self._live})",
            dead_params=(),
            ph="%s",
        )
        async with self.connection() as conn:
            cursor = await conn.execute(f"{self._select} WHERE {where}", params)
            rows = [to_obligation(row) for row in await cursor.fetchall()]
        known = self._known
        while known and len(known) + len(rows) > _KNOWN_LIMIT:
            del known[next(iter(known))]  # the oldest
        for row in rows:
            if row.state is not State.ATTEMPTING:  # pending or failed: changes only by fence
                known[row.id] = row
        return rows

    async def claim(self, obligation_id: str, *, fence: int, now: float) -> Obligation | None:
        return await self._claims.call((obligation_id, fence, now))

    async def claim_many(
        self, items: Sequence[tuple[str, int]], *, now: float
    ) -> list[Obligation | None]:
        # A row the page read at this fence, not attempting, cannot have changed since
        # without its fence moving (only its holder changes an attempting row in place; every
        # claim, abandon and retry moves the fence), so only its id comes back and the claim's
        # changes are applied to it here. Any other row comes back whole.
        known: list[tuple[int, Obligation]] = []
        unknown: list[tuple[int, tuple[str, int, float]]] = []
        for index, (oid, fence) in enumerate(items):
            row = self._known.pop(oid, None)
            if row is not None and row.fence == fence:
                known.append((index, row))
            else:
                unknown.append((index, (oid, fence, now)))
        results: list[Obligation | None] = [None] * len(items)
        if unknown:
            found = await self._page_claims.call_many([item for _, item in unknown])
            for (index, _), claimed in zip(unknown, found, strict=True):
                results[index] = claimed
        if known:
            won = await self._page_known_claims.call_many(
                [(row.id, row.fence, now, row.created_at) for _, row in known]
            )
            for (index, row), took in zip(known, won, strict=True):
                if took:
                    results[index] = claimed_row(row, row.fence, self._owner, now)
        return results

    async def mark_delivered(
        self, items: Sequence[tuple[str, int, MessageRef]], *, now: float
    ) -> list[bool]:
        return await self._page_delivered.call_many(
            [
                (oid, fence, now, ref.channel, ref.message_id, ref.thread)
                for oid, fence, ref in items
            ]
        )

    async def abandon(
        self, obligation_id: str, *, fence: int, now: float, reason: str
    ) -> Obligation | None:
        found = await self._one(
            f"UPDATE {self._t} SET state = 'abandoned', fence = fence + 1, last_error = %s, "
            "next_attempt_at = NULL, penalty = FALSE, updated_at = %s "
            "WHERE id = %s AND fence = %s AND state IN ('pending', 'attempting', 'failed') "
            f"RETURNING {COLUMNS}",
            (reason, now, obligation_id, fence),
        )
        return None if found is None else to_obligation(found)

    async def progress(
        self, obligation_id: str, *, fence: int, ref: MessageRef, now: float
    ) -> Obligation | None:
        return await self._held.call(
            (obligation_id, fence, now, None, None, False, None, encode_refs([ref]))
        )

    async def settle(
        self,
        obligation_id: str,
        *,
        fence: int,
        state: State,
        now: float,
        next_attempt_at: float | None = None,
        penalty: bool = False,
        last_error: str | None = None,
        ref: MessageRef | None = None,
    ) -> Obligation | None:
        return await self._held.call(
            (
                obligation_id,
                fence,
                now,
                state.value,
                next_attempt_at,
                penalty,
                last_error,
                encode_refs([] if ref is None else [ref]),
            )
        )

    async def prove_claim(self, obligation_id: str, *, fence: int, now: float) -> Obligation | None:
        return await self.settle(obligation_id, fence=fence, state=State.ATTEMPTING, now=now)

    async def counts_by_state(self, *, profiles: Collection[str] | None = None) -> dict[State, int]:
        counts = dict.fromkeys(State, 0)
        async with self.connection() as conn:
            if profiles is None:
                cursor = await conn.execute(f"SELECT state, count(*) FROM {self._t} GROUP BY state")
            else:
                cursor = await conn.execute(
                    f"SELECT state, count(*) FROM {self._t} WHERE profile = ANY(%s) GROUP BY state",
                    (sorted(profiles),),
                )
            for state, count in await cursor.fetchall():
                counts[State(state)] = int(count)
        return counts

    async def rows(
        self,
        *,
        states: Collection[State] | None = None,
        channel: str | None = None,
        created_before: float | None = None,
        created_after: float | None = None,
        limit: int = 100,
    ) -> list[Obligation]:
        where, params = filters_sql(states, channel, created_before, created_after, ph="%s")
        async with self.connection() as conn:
            cursor = await conn.execute(
                f"{self._select}{where} ORDER BY created_at DESC, id DESC LIMIT %s",
                (*params, limit),
            )
            return [to_obligation(row) for row in await cursor.fetchall()]

    async def retry(self, obligation_id: str, *, now: float) -> Obligation | None:
        found = await self._one(
            f"UPDATE {self._t} SET state = 'pending', fence = fence + 1, resends = 0, "
            "created_at = %s, updated_at = %s, next_attempt_at = NULL, penalty = FALSE, "
            f"owner = NULL WHERE id = %s AND state = 'abandoned' RETURNING {COLUMNS}",
            (now, now, obligation_id),
        )
        return None if found is None else to_obligation(found)

    async def purge(self, *, states: Collection[State], created_before: float | None = None) -> int:
        final = [state for state in states if state.final]
        if not final:
            return 0
        where, params = filters_sql(final, None, created_before, None, ph="%s")
        async with self.connection() as conn:
            cursor = await conn.execute(f"DELETE FROM {self._t}{where}", params)
            return cursor.rowcount

    async def prune(self, *, delivered_before: float) -> int:
        async with self.connection() as conn:
            cursor = await conn.execute(
                f"DELETE FROM {self._t} WHERE state = 'delivered' AND updated_at < %s",
                (delivered_before,),
            )
            return cursor.rowcount

    async def drop_tables(self) -> None:
        """Remove this prefix's tables (tests and benchmarks clean up with it)."""
        async with self.connection() as conn:
            for table in ("ledger", "owners", "kv"):
                await conn.execute(f"DROP TABLE IF EXISTS {self.prefix}{table}")
