"""The embedded ledger: one SQLite file, WAL, ``synchronous=FULL``, one writer thread (and,
with ``writer="process"`` or ``"auto"``, a writer process for the hot statements, ADR 0186,
0187).

Accepted means durable across a power cut, not only a process kill. Every write goes through
``SQLiteWriter``, which batches concurrent calls into group commits off the event loop; the
sweeps' page reads (``candidates``) go through a second connection (``SQLiteReader``).
Ownership is host, process id and process start time; whether an owner is alive is read from
``/proc`` on this host, so a SQLite ledger belongs to one host (see ``owner.py``).
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Literal, TypeVar

from bridge_core.ledger.inflight import RecordInFlight
from bridge_core.ledger.liveness import Liveness
from bridge_core.ledger.model import LedgerError, LedgerWriter, Obligation, Reply, State
from bridge_core.ledger.owner import current_owner
from bridge_core.ledger.rows import (
    COLUMNS,
    claimed_row,
    decode_refs,
    filters_sql,
    held_row,
    in_page_order,
    new_row,
    scope_where,
    to_obligation,
)
from bridge_core.ledger.sqlmerged import (
    ClaimItem,
    ClaimResult,
    DeliveredItem,
    HeldItem,
    HeldResult,
    MergedClaims,
    MergedDelivered,
    MergedHeldUpdates,
    MergedRecords,
)
from bridge_core.ledger.sqlprocess import hot_writer
from bridge_core.ledger.sqlreader import SQLiteReader, TakenRows
from bridge_core.ledger.sqlschema import (
    BUSY_TIMEOUT_MS,
    OPEN_SQL,
    SCHEMA,
    configure_connection,
    setup_connection,
)
from bridge_core.ledger.sqlwriter import SQLiteWriter
from bridge_core.ledger.store import CLAIMABLE_STATES, Scope
from bridge_core.provider import MessageRef

__all__ = ["OPEN_SQL", "SCHEMA", "SQLiteLedgerStore", "configure_connection"]

_OPEN_STATES = tuple(state.value for state in CLAIMABLE_STATES)
_CLAIMABLE_UNHELD = frozenset({State.PENDING, State.FAILED})
# Settles whose commit need not be fsynced: delivered, and the proof of a held claim (it changes
# only ``updated_at``). Lost on a power cut, the row is still attempting at its fence (ADR 0143).
_UNSYNCED_SETTLES = frozenset({State.DELIVERED, State.ATTEMPTING})
_KNOWN_LIMIT = 50_000
_SELECT = f"SELECT {COLUMNS} FROM ledger"
T = TypeVar("T")


class SQLiteLedgerStore:
    """A ledger in one SQLite file (created with its folder if missing).

    ``writer``: where the record, claim and settle statements run (``LedgerWriter``); the
    gateway's default is ``"auto"`` (ADR 0187)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        owner: str | None = None,
        writer: LedgerWriter = "thread",
    ) -> None:
        self.path = Path(path)
        self._me = current_owner()
        self._owner = owner if owner is not None else str(self._me)
        self.writer = SQLiteWriter(str(self.path), setup=self._setup)
        # the sweeps' page reads, on a connection of their own off the writer's thread
        self._reader = SQLiteReader(str(self.path), setup=self._setup_reader)
        self._live_for_reads: set[str] = set()
        self._liveness = Liveness(self._owner, me=self._me)
        self._records = MergedRecords(self._owner)
        liveness = self._liveness
        self._claims = MergedClaims(self._owner, liveness.forget_live, lambda: liveness.dead_json)
        self._held = MergedHeldUpdates(self._owner)
        self._delivered = MergedDelivered(self._owner)
        # The writer of the hot, merged statements (record, claim, settle): the thread itself,
        # or a process of its own (``writer="process"``, ADR 0186); functions of the connection
        # (``writer.call``) always run on the thread.
        merged = (self._records, self._claims, self._held, self._delivered)
        self.hot = hot_writer(
            writer, str(self.path), owner=self._owner, thread=self.writer, kinds=merged
        )
        # Rows as this store last wrote or read them, so a claim or a held update that follows
        # needs only the id back instead of the whole row (event loop thread only; bounded).
        self._known: dict[str, Obligation] = {}

    @property
    def owner(self) -> str:
        return self._owner

    async def _after_hot(self, run: Callable[[sqlite3.Connection], T]) -> T:
        """``run`` on the writer thread, after every merged call made before it, whichever
        writer has them: a read or write there sees what they did, as with the thread alone."""
        await self.hot.caught_up()
        return await self.writer.call(run)

    def _setup(self, conn: sqlite3.Connection) -> None:
        setup_connection(conn)
        # The claim re-checks, inside its compare-and-swap, that the row's owner is dead.
        conn.create_function("owner_alive", 1, self._liveness.alive, deterministic=False)
        # take_row on the writer too, so a page read's statement can be planned here (EXPLAIN);
        # the reads themselves run on the reader's connection, through its own TakenRows
        TakenRows(conn)

    def _setup_reader(self, conn: sqlite3.Connection) -> None:
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_MS)}")
        # the same liveness as the writer's, with its own within-a-statement memory of the live
        conn.create_function(
            "owner_alive", 1, lambda owner: self._liveness.alive(owner, self._live_for_reads)
        )
        self._taken = TakenRows(conn)

    def now(self) -> float:
        return time.time()  # a SQLite ledger belongs to one host: its clock is the store's

    @property
    def renew_interval(self) -> float | None:
        return None  # liveness is read from the process itself, not from a lease

    @property
    def location(self) -> str:
        return str(self.path)

    async def open(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            await self.writer.start()
            if self.hot is not self.writer:
                try:
                    await self.hot.start()
                except BaseException:
                    await self.writer.stop()
                    raise
        except (OSError, sqlite3.Error) as error:
            raise LedgerError(
                f"cannot open the ledger file {self.path}: {error}; check the path and that "
                "this user may write to its folder"
            ) from error

    async def aclose(self) -> None:
        try:
            if self.hot is not self.writer:
                await self.hot.stop()
        finally:
            try:
                await self._reader.aclose()
            finally:
                await self.writer.stop()

    async def renew(self) -> None:
        return None

    def _remember(self, row: Obligation) -> Obligation:
        if len(self._known) >= _KNOWN_LIMIT:
            del self._known[next(iter(self._known))]  # the oldest
        self._known[row.id] = row
        return row

    def _remember_all(self, rows: Sequence[Obligation]) -> None:
        """``_remember`` each of ``rows``, in one call (a page or a batch of a sweep)."""
        known = self._known
        for row in rows:
            if len(known) >= _KNOWN_LIMIT:
                del known[next(iter(known))]
            known[row.id] = row

    def _recall(self, obligation_id: str, fence: int) -> Obligation | None:
        known = self._known.pop(obligation_id, None)
        return known if known is not None and known.fence == fence else None

    async def dead_owners(self) -> set[str]:
        def run(conn: sqlite3.Connection) -> list[str]:
            self._liveness.forget_live()
            found = conn.execute(
                f"SELECT DISTINCT owner FROM ledger WHERE ({OPEN_SQL}) AND owner IS NOT NULL"
            )
            return [owner for (owner,) in found]

        # read through the open rows' index; liveness from /proc (remembered for the dead)
        return {owner for owner in await self._after_hot(run) if not self._liveness.alive(owner)}

    async def record(
        self, reply: Reply, *, now: float, claimed: bool = False
    ) -> tuple[Obligation, bool]:
        # The new row is built here rather than read back: the writer thread does less.
        fresh = new_row(reply, owner=self._owner, now=now, claimed=claimed)
        return self._recorded(await self.hot.call_merged(self._records, fresh))

    def _recorded(self, recorded: tuple[Obligation, bool]) -> tuple[Obligation, bool]:
        row, created = recorded
        if created or row.state in _CLAIMABLE_UNHELD:  # new: pending, or held by this store
            self._remember(row)
        return recorded

    def record_soon(
        self, reply: Reply, *, now: float, claimed: bool = False
    ) -> RecordInFlight | None:
        """``record`` queued to the writer now, not awaited (ADR 0164); ``None`` off asyncio."""
        recording = RecordInFlight(new_row(reply, owner=self._owner, now=now, claimed=claimed))
        call = self.hot.queue_merged(
            self._records, recording.fresh, committing=recording.at_commit, then=recording.ended
        )
        if call is None or call.future is None:
            return None
        recording.follow(call.future.get_loop(), lambda: self._recorded(call.outcome()))
        return recording

    async def get(self, obligation_id: str) -> Obligation | None:
        def run(conn: sqlite3.Connection) -> Obligation | None:
            found = conn.execute(f"{_SELECT} WHERE id = ?", (obligation_id,)).fetchone()
            return None if found is None else to_obligation(found)

        row = await self._after_hot(run)
        if row is not None and row.state in _CLAIMABLE_UNHELD:
            self._remember(row)
        return row

    async def candidates(self, scope: Scope, *, now: float) -> list[Obligation]:
        where, params = scope_where(
            scope,
            now=now,
            me=self._owner,
            # owners already found dead first: a page of a dead owner's rows then calls back
            # into Python (and takes the GIL from the event loop) for none of them
            dead_sql="owner IS NULL OR (owner != ? AND (owner IN (SELECT value FROM json_each(?)) "
            "OR NOT owner_alive(owner)))",
            dead_params=(self._owner, self._liveness.dead_json),
            open_sql=OPEN_SQL,
            ph="?",
        )

        def run(conn: sqlite3.Connection) -> list[Obligation]:
            self._live_for_reads.clear()
            found = self._taken.read(conn, COLUMNS, f"FROM ledger WHERE {where}", params)
            rows = [to_obligation(row) for row in found]
            if not in_page_order(rows):  # SQLite does not promise it; it keeps the subquery's
                rows.sort(key=lambda row: (row.created_at, row.id))
            return rows

        rows = await self._reader.call(run)
        self._remember_all([row for row in rows if row.state in _CLAIMABLE_UNHELD])
        return rows

    async def claim(self, obligation_id: str, *, fence: int, now: float) -> Obligation | None:
        item, known = self._claim_item(obligation_id, fence, now)
        return self._claimed(known, await self.hot.call_merged(self._claims, item), fence, now)

    async def claim_many(
        self, items: Sequence[tuple[str, int]], *, now: float
    ) -> list[Obligation | None]:
        # One call of the writer for them all: the claims share its statements and its commit.
        # ``_claim_item`` and ``_claimed`` inlined: a sweep claims every row it sends here.
        knowns: list[Obligation | None] = []
        claim_items: list[ClaimItem] = []
        remembered = self._known
        for obligation_id, fence in items:
            known = remembered.pop(obligation_id, None)  # ``_recall``
            if known is not None and (known.fence != fence or known.state not in _CLAIMABLE_UNHELD):
                known = None
            knowns.append(known)
            claim_items.append(
                (obligation_id, fence, now, None if known is None else known.created_at)
            )
        results = await self.hot.call_merged_many(self._claims, claim_items)
        claimed: list[Obligation | None] = []
        owner = self._owner
        for (_, fence), known, result in zip(items, knowns, results, strict=True):
            if result is None or result is False:
                claimed.append(None)
            elif result is True:
                assert known is not None
                claimed.append(claimed_row(known, fence, owner, now))
            else:
                claimed.append(result)
        self._remember_all([row for row in claimed if row is not None])
        return claimed

    async def claim_read(
        self,
        rows: Sequence[Obligation],
        *,
        now: float,
        begun: Callable[[], None] | None = None,
        committing: Callable[[], None] | None = None,
    ) -> list[Obligation | Literal[True] | None]:
        """``claim_many`` of rows as a page read them, for a sweep (ADR 0176): each row is its
        own compare-and-swap on the fence it was read with, as there. A row read ``pending``
        or ``failed`` cannot change without its fence moving (only its holder changes an
        attempting row in place), so its claim also binds the ``created_at`` read and comes
        back ``True``: claimed, and the row after the claim is ``claimed_row(row, row.fence,
        owner, now)``, which the caller builds only if it needs it (nothing of it is built or
        remembered here). A row read ``attempting`` comes back as the row the claim left, or
        ``None`` (as every row not claimed). ``begun`` and ``committing``: the writer's
        signals for the claim's batch (``SQLiteWriter.call_merged_many``)."""
        items: list[ClaimItem] = []
        forget = self._known.pop
        for row in rows:
            forget(row.id, None)  # its fence moves: what was remembered of it is spent
            items.append(
                (
                    row.id,
                    row.fence,
                    now,
                    row.created_at if row.state in _CLAIMABLE_UNHELD else None,
                )
            )
        results = await self.hot.call_merged_many(
            self._claims, items, begun=begun, committing=committing
        )
        claimed: list[Obligation | Literal[True] | None] = []
        for result in results:
            if result is True or result is None:  # nearly every row: True
                claimed.append(result)
            elif result is False:
                claimed.append(None)
            else:  # read attempting, and its claim's row is what came back
                claimed.append(self._remember(result))
        return claimed

    def _claim_item(
        self, obligation_id: str, fence: int, now: float
    ) -> tuple[ClaimItem, Obligation | None]:
        # A row read at this fence and not attempting cannot have changed since without its
        # fence moving (only its holder changes an attempting row in place), so the claim's
        # changes are applied to it here and only the id comes back.
        known = self._recall(obligation_id, fence)
        if known is not None and known.state not in _CLAIMABLE_UNHELD:
            known = None
        return (obligation_id, fence, now, None if known is None else known.created_at), known

    def _claimed(
        self, known: Obligation | None, result: ClaimResult, fence: int, now: float
    ) -> Obligation | None:
        if result is None or result is False:
            return None
        if result is True:
            assert known is not None
            result = claimed_row(known, fence, self._owner, now)
        return self._remember(result)

    async def abandon(
        self, obligation_id: str, *, fence: int, now: float, reason: str
    ) -> Obligation | None:
        self._known.pop(obligation_id, None)

        def run(conn: sqlite3.Connection) -> Obligation | None:
            found = conn.execute(
                "UPDATE ledger SET state = 'abandoned', fence = fence + 1, last_error = ?, "
                "next_attempt_at = NULL, penalty = 0, updated_at = ? "
                "WHERE id = ? AND fence = ? AND state IN ('pending', 'attempting', 'failed') "
                f"RETURNING {COLUMNS}",
                (reason, now, obligation_id, fence),
            ).fetchone()
            return None if found is None else to_obligation(found)

        return await self._after_hot(run)

    async def progress(
        self, obligation_id: str, *, fence: int, ref: MessageRef, now: float
    ) -> Obligation | None:
        item, known = self._held_item(obligation_id, fence, now, ref=ref)
        # A part's ref lost on a power cut: that part goes again, labelled (ADR 0143).
        result = await self.hot.call_merged(self._held, item, durable=False)
        return self._held_result(known, result, now, ref=ref)

    async def mark_delivered(
        self, items: Sequence[tuple[str, int, MessageRef]], *, now: float
    ) -> list[bool]:
        # One call of the writer for them all, as ``claim_many``; a delivered row is final, so
        # nothing of it is kept or rebuilt here, and only whether each settled comes back.
        prepared: list[DeliveredItem] = []
        remembered, owner = self._known, self._owner
        for oid, fence, ref in items:
            # ``_recall`` inlined (a sweep settles every row here), then as in ``_held_item``:
            # the row as claimed here
            known = remembered.pop(oid, None)
            if known is not None and (
                known.fence != fence or known.state is not State.ATTEMPTING or known.owner != owner
            ):
                known = None
            created_at = None if known is None else known.created_at
            prepared.append((oid, fence, now, ref.channel, ref.message_id, ref.thread, created_at))
        # Settles need not survive a power cut, only a process kill (ADR 0143).
        return await self.hot.call_merged_many(self._delivered, prepared, durable=False)

    def _held_item(
        self,
        obligation_id: str,
        fence: int,
        now: float,
        *,
        ref: MessageRef | None,
        state: State | None = None,
        next_attempt_at: float | None = None,
        penalty: bool = False,
        last_error: str | None = None,
    ) -> tuple[HeldItem, Obligation | None]:
        # The row as this store claimed it: at its fence only these updates change it, and the
        # columns they append to (delivered, last_error) come back from the statement.
        known = self._recall(obligation_id, fence)
        if known is not None and (
            known.state is not State.ATTEMPTING or known.owner != self._owner
        ):
            known = None
        item: HeldItem = (
            obligation_id,
            fence,
            now,
            None if state is None else state.value,
            next_attempt_at,
            int(penalty),
            last_error,
            "" if ref is None else ref.channel,
            "" if ref is None else ref.message_id,
            None if ref is None else ref.thread,
            int(ref is not None),
            None if known is None else known.created_at,
        )
        return item, known

    def _held_result(
        self,
        known: Obligation | None,
        result: HeldResult,
        now: float,
        *,
        ref: MessageRef | None,
        state: State | None = None,
        next_attempt_at: float | None = None,
        penalty: bool = False,
    ) -> Obligation | None:
        if result is None:
            return None
        if isinstance(result, tuple):
            assert known is not None
            stored_error, count, stored = result
            delivered = known.delivered if ref is None else (*known.delivered, ref)
            if count != len(delivered):  # another writer appended at this fence: read them all
                delivered = decode_refs(stored)
            if state is None:  # a part's progress: only its refs and its time move
                result = held_row(
                    known,
                    known.state,
                    known.penalty,
                    known.next_attempt_at,
                    now,
                    stored_error,
                    delivered,
                )
            else:
                result = held_row(
                    known, state, penalty, next_attempt_at, now, stored_error, delivered
                )
        if not result.state.final:
            self._remember(result)
        return result

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
        # No coroutine in between: the settle is awaited once a reply (see call_merged).
        item, known = self._held_item(
            obligation_id,
            fence,
            now,
            ref=ref,
            state=state,
            next_attempt_at=next_attempt_at,
            penalty=penalty,
            last_error=last_error,
        )
        # A settle lost on a power cut leaves the row attempting: it is resent labelled as a
        # possible duplicate (ADR 0143), so only a settle that gives up (abandoned) or
        # schedules a resend (failed, pending) waits for an fsync.
        result = await self.hot.call_merged(
            self._held, item, durable=state not in _UNSYNCED_SETTLES
        )
        return self._held_result(
            known,
            result,
            now,
            ref=ref,
            state=state,
            next_attempt_at=next_attempt_at,
            penalty=penalty,
        )

    async def prove_claim(self, obligation_id: str, *, fence: int, now: float) -> Obligation | None:
        return await self.settle(obligation_id, fence=fence, state=State.ATTEMPTING, now=now)

    async def counts_by_state(self, *, profiles: Collection[str] | None = None) -> dict[State, int]:
        def run(conn: sqlite3.Connection) -> dict[State, int]:
            counts = dict.fromkeys(State, 0)
            if profiles is None:
                found = conn.execute("SELECT state, count(*) FROM ledger GROUP BY state")
            else:
                names = sorted(profiles)
                found = conn.execute(
                    f"SELECT state, count(*) FROM ledger WHERE profile IN "
                    f"({', '.join('?' * len(names))}) GROUP BY state",
                    names,
                )
            for state, count in found:
                counts[State(state)] = int(count)
            return counts

        # On the reader, not the writer: a count scans every row (0.4 s at a million), and on
        # the writer's thread every reply recorded meanwhile would wait for a /metrics scrape
        return await self._reader.call(run)

    async def rows(
        self,
        *,
        states: Collection[State] | None = None,
        channel: str | None = None,
        created_before: float | None = None,
        created_after: float | None = None,
        limit: int = 100,
    ) -> list[Obligation]:
        where, params = filters_sql(states, channel, created_before, created_after, ph="?")

        def run(conn: sqlite3.Connection) -> list[Obligation]:
            found = conn.execute(
                f"{_SELECT}{where} ORDER BY created_at DESC, id DESC LIMIT ?", (*params, limit)
            )
            return [to_obligation(row) for row in found]

        return await self._reader.call(run)  # as ``counts_by_state``: a listing sorts every row

    async def retry(self, obligation_id: str, *, now: float) -> Obligation | None:
        self._known.pop(obligation_id, None)

        def run(conn: sqlite3.Connection) -> Obligation | None:
            found = conn.execute(
                "UPDATE ledger SET state = 'pending', fence = fence + 1, resends = 0, "
                "created_at = ?, updated_at = ?, next_attempt_at = NULL, penalty = 0, "
                f"owner = NULL WHERE id = ? AND state = 'abandoned' RETURNING {COLUMNS}",
                (now, now, obligation_id),
            ).fetchone()
            return None if found is None else to_obligation(found)

        return await self._after_hot(run)

    async def purge(self, *, states: Collection[State], created_before: float | None = None) -> int:
        final = [state for state in states if state.final]
        if not final:
            return 0
        where, params = filters_sql(final, None, created_before, None, ph="?")

        def run(conn: sqlite3.Connection) -> int:
            return conn.execute(f"DELETE FROM ledger{where}", params).rowcount

        return await self._after_hot(run)

    async def prune(self, *, delivered_before: float) -> int:
        def run(conn: sqlite3.Connection) -> int:
            return conn.execute(
                "DELETE FROM ledger WHERE state = 'delivered' AND updated_at < ?",
                (delivered_before,),
            ).rowcount

        return await self._after_hot(run)
