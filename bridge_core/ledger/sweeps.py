"""Sweeps: sending every claimable row in a scope, and the outcome each attempt counts as.

``DeliveryLedger`` sweeps at the start (``boot_sweep``), after a platform reconnects, on a timer
and when an owner dies; the two ways of sweeping are here, so ``engine.py`` stays the ledger's
one-row path (record, claim, send, settle, resend on timers). They are the ledger's own methods
moved out of it, and use its state as its methods do: the ids it is sending now (a row in flight
here is never claimed twice) and its one-row ``_send`` and ``_attempt``.

- ``sweep_in_pages``: half a page's rows claimed in one statement, committed while the half
  before is sent; the delivered ones settled in the commit after their send (ADR 0110).
- ``sweep_at_turns`` (``deliver_begins``): each row claimed at its own turn, so a crash marks
  only the rows whose sends had begun (ADR 0025).
"""

from __future__ import annotations

import dataclasses
import enum
import logging
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import anyio
import anyio.abc
import anyio.lowlevel

from bridge_core.ledger.frozen import quick_init
from bridge_core.ledger.model import ClaimLost, Obligation, part_delivery
from bridge_core.ledger.report import SweepReport
from bridge_core.ledger.rows import claimed_row
from bridge_core.ledger.schedule import Abandon, marker_for, verdict_at_claim
from bridge_core.ledger.store import Scope
from bridge_core.provider import MessageRef, ProviderError

if TYPE_CHECKING:
    from bridge_core.ledger.engine import DeliveryLedger

__all__ = ["SENT", "Outcome", "Ready", "SweepOutcome", "sweep_at_turns", "sweep_in_pages"]

log = logging.getLogger("bridge_core.ledger")


class SweepOutcome(enum.StrEnum):
    """How one attempt at a row ended; each names the ``SweepReport`` field it counts in."""

    DELIVERED = "delivered"
    FAILED = "failed"
    ABANDONED = "abandoned"
    SKIPPED = "skipped"  # not sent: claimed elsewhere, already settled, or its claim was lost


@quick_init  # built once a reply sent: see frozen.py
@dataclass(frozen=True, slots=True)
class Outcome:
    kind: SweepOutcome
    marked: bool = False
    row: Obligation | None = None  # the row as it ended, when known


Ready = tuple[Obligation, bool, bool, float | None]
"""A claimed row, whether it is marked, whether its poster is alive, and the time of its claim
when the row is as read before it (the store claimed it as read, ``claim_read``; ``None``: the
row is the claim's own)."""
Sent = tuple[str, int, MessageRef, bool]
"""A row whose last part went out, to settle: its id, the fence it is held at, the last
part's ref, whether it was marked."""
Batch = tuple[
    float,
    list[tuple[Obligation, bool, bool]],
    list[tuple[Obligation, str]],
    tuple[float, str] | None,
    list[Sent],
]
"""A batched sweep's next commit: its time, the rows to claim (as read, marked, poster alive),
the rows to abandon and why, where the next page starts (``None``: no read), the sends to
settle."""
# the last part went out and the caller settles it (a batched sweep): told apart by identity
SENT = Outcome(SweepOutcome.DELIVERED)


async def sweep_in_pages(ledger: DeliveryLedger, scope: Scope) -> SweepReport:
    """Rows are claimed a batch (half a page, ``Scope.limit // 2``) at a time, each batch in
    one statement, and sent in order by up to ``schedule.concurrency`` workers. The commit that
    claims the next batch runs while this batch is sent: it also settles the rows of the batch
    sent before (the delivered ones together) and, when the rows read run short, reads the next
    page (ADR 0110). A row is sent only after the commit that claimed it, at most one batch
    ahead of its send, so at most a page's rows are claimed and not yet sent at any time.

    A crash after a batch's claim leaves its rows ``attempting``: every one is resent at the
    next start, labelled as a possible duplicate, as a row claimed just before its send is.
    """
    counts = dict.fromkeys(SweepReport.__slots__, 0)
    sent: list[Sent] = []  # last part sent, not yet settled
    size = max(1, scope.limit // 2)
    unclaimed: deque[Obligation] = deque()  # read, not yet looked at
    ready: list[Ready] = []  # claimed by the last commit: sent while the next one runs
    held: list[Obligation | Literal[True] | None] = []
    # Rows claimed as read (ADR 0176): the claimed row is built only when a send needs more
    # than its delivery (a failure, later parts), so nearly every row is built once, when read.
    claim_read = getattr(ledger.store, "claim_read", None)
    owner = ledger.store.owner

    async def settle(done: list[Sent]) -> None:
        try:
            rows = await ledger.store.mark_delivered(
                [(oid, fence, ref) for oid, fence, ref, _ in done], now=ledger._clock()
            )
        finally:
            for oid, _, _, _ in done:
                ledger._sending.discard(oid)
        for (oid, _, _, marked), settled in zip(done, rows, strict=True):
            if not settled:
                log.warning("ledger: %s was taken over during its send; stopping", oid)
            counts["delivered" if settled else "skipped"] += 1
            counts["claimed"] += 1
            counts["marked"] += marked

    async def abandon(row: Obligation, reason: str, now: float) -> None:
        gone = await ledger.store.abandon(row.id, fence=row.fence, now=now, reason=reason)
        if gone is not None:
            log.warning("ledger: abandoned %s: %s", row.id, reason)
        counts["abandoned" if gone is not None else "skipped"] += 1
        counts["claimed"] += gone is not None

    async def read(after: tuple[float, str], read_done: anyio.Event) -> None:
        page = await ledger.store.candidates(
            dataclasses.replace(scope, after=after), now=ledger._clock()
        )
        unclaimed.extend(page)
        cursor[0] = (page[-1].created_at, page[-1].id) if len(page) >= scope.limit else None
        read_done.set()

    async def claim(
        rows: list[Obligation], now: float, begun: anyio.Event, committing: anyio.Event
    ) -> None:
        try:
            if claim_read is not None:
                held[:] = await claim_read(
                    rows, now=now, begun=begun.set, committing=committing.set
                )
            else:
                held[:] = await ledger.store.claim_many(
                    [(row.id, row.fence) for row in rows], now=now
                )
        finally:
            begun.set()
            committing.set()

    async def work(todo: Iterator[Ready], group: anyio.abc.TaskGroup, left: int) -> None:
        deliver = ledger._deliver
        for row, marked, poster_alive, claimed_at in todo:
            if left:  # the next worker starts when this one first waits (if it does)
                group.start_soon(work, todo, group, left - 1)
                left = 0
            part = len(row.delivered)
            parts = len(row.chunks)
            read = claimed_at is not None  # ``row`` as read, before its claim
            try:
                if part + 1 == parts:
                    # One part left (nearly every row): ``_send``'s steps for it, without its
                    # generality (a claim at the turn, later parts' progress), to a ref that is
                    # settled with the next commit. Claimed already: no claim in begin(). A row
                    # as read goes out with its claim's fence and attempt (one more of each).
                    delivery = part_delivery(
                        row,
                        part,
                        marker_for(first_part=part) if marked else None,
                        read,
                        None,
                        poster_alive,
                    )
                    try:
                        ref = await deliver(delivery)
                    except ClaimLost:
                        outcome = Outcome(SweepOutcome.SKIPPED)
                    except Exception as error:
                        if not isinstance(error, ProviderError):  # unclassified: transient
                            log.exception(
                                "ledger: delivery of %s raised a non-provider error", row.id
                            )
                        if claimed_at is not None:
                            row = claimed_row(row, row.fence, owner, claimed_at)
                        outcome = await ledger._failed(row, error, marked)
                    else:
                        sent.append((row.id, row.fence + read, ref, marked))
                        continue  # settled with the next commit
                else:  # several parts: each but the last commits its progress before the next
                    if claimed_at is not None:
                        row = claimed_row(row, row.fence, owner, claimed_at)
                    outcome = await ledger._send(
                        row, marked=marked, poster_alive=poster_alive, sent=sent
                    )
                    if outcome is SENT:
                        continue  # settled with the next commit
            except BaseException:
                ledger._sending.discard(row.id)
                raise
            ledger._sending.discard(row.id)
            counts[outcome.kind] += 1
            counts["claimed"] += outcome.kind is not SweepOutcome.SKIPPED
            counts["marked"] += outcome.marked

    page = await ledger.store.candidates(scope, now=ledger._clock())
    unclaimed.extend(page)
    cursor: list[tuple[float, str] | None] = [
        (page[-1].created_at, page[-1].id) if len(page) >= scope.limit else None
    ]
    todo: Iterator[Ready] = iter(())
    sending = ledger._sending
    schedule = ledger.schedule

    def choose() -> Batch:
        """The next commit's work: the next batch's claims (each row's verdict taken now) and
        abandons, the next page's start when the rows read run short, the sends to settle."""
        now = ledger._clock()
        claims: list[tuple[Obligation, bool, bool]] = []
        abandons: list[tuple[Obligation, str]] = []
        # Nothing awaits in this loop, so whether a platform is connected is asked once a batch
        # per platform, and the store's owner read once.
        connected: dict[str, bool] = {}
        me = ledger.store.owner
        while unclaimed and len(claims) < size:
            row = unclaimed.popleft()
            up = connected.get(row.platform)
            if up is None:
                up = connected[row.platform] = bool(ledger._connected(row.platform))
            if not up or row.id in sending:
                counts["skipped"] += 1
                continue
            verdict = verdict_at_claim(row, now=now, schedule=schedule)
            if isinstance(verdict, Abandon):
                abandons.append((row, verdict.reason))
                continue
            claims.append((row, verdict.marked, row.owner == me))
            sending.add(row.id)
        after = cursor[0] if len(unclaimed) < size else None
        cursor[0] = None if after is not None else cursor[0]
        done = sent[:]
        sent.clear()
        return now, claims, abandons, after, done

    chosen: Batch | None = None  # chosen while the last commit synced the file
    claims: list[tuple[Obligation, bool, bool]] = []  # row as read, marked, poster alive
    try:
        while True:
            now, claims, abandons, after, done = chosen if chosen is not None else choose()
            chosen = None
            if not (claims or abandons or after or done or ready):
                break
            held.clear()
            # One commit: the settles of the batch sent last, this batch's claims and, when the
            # rows read run short, the next page; the batch the last commit claimed is sent
            # meanwhile. Sends start once the writer holds the claim's batch (``begun``, SQLite):
            # until then this loop sleeps, so the writer thread takes the GIL at once instead of
            # waiting out the sends' Python, and its statements run beside them (ADR 0180).
            # Without that signal, two checkpoints on: the calls are made in the first, and a
            # store that gathers an event loop iteration's calls hands them over in the second.
            async with anyio.create_task_group() as group:
                if done:
                    group.start_soon(settle, done)
                for row, reason in abandons:
                    group.start_soon(abandon, row, reason, now)
                read_done = anyio.Event()
                if after is not None:
                    group.start_soon(read, after, read_done)
                else:
                    read_done.set()
                begun, committing = anyio.Event(), anyio.Event()
                hinted = bool(claims) and claim_read is not None  # the writer signals both
                if claims:
                    group.start_soon(claim, [row for row, _, _ in claims], now, begun, committing)
                if ready:
                    if hinted:
                        await begun.wait()
                    else:
                        await anyio.lowlevel.checkpoint()
                        await anyio.lowlevel.checkpoint()
                    todo = iter(ready)  # the workers share it: each row starts in order
                    ready = []
                    async with anyio.create_task_group() as senders:
                        senders.start_soon(work, todo, senders, ledger.schedule.concurrency - 1)
                if hinted:
                    # The next batch is chosen while this commit's fsync runs without the GIL
                    # (ADR 0180), not after the commit, while the writer would wait for it. It
                    # is only chosen: its claims go to the writer after this commit, as before.
                    await committing.wait()
                    if read_done.is_set():
                        chosen = choose()
            for (row, marked, poster_alive), claimed in zip(claims, held, strict=True):
                if claimed is True:  # claimed as read
                    ready.append((row, marked, poster_alive, now))
                elif claimed is None:
                    ledger._sending.discard(row.id)
                    counts["skipped"] += 1
                else:
                    ready.append((claimed, marked, poster_alive, None))
            claims = []
    finally:
        # cancelled or failed: rows claimed, sent but not settled, or never sent, are not being
        # sent now (a claimed row left unsent is resent, labelled, by the next sweep or start)
        if chosen is not None:  # chosen, never claimed: its rows and its sends to settle
            _, chosen_claims, _, _, unsettled = chosen
            claims = claims + chosen_claims
            sent.extend(unsettled)
        for row, _, _ in claims:
            ledger._sending.discard(row.id)
        for claimed, _, _, _ in (*ready, *todo):  # claimed, never started
            ledger._sending.discard(claimed.id)
        for oid, _, _, _ in sent:
            ledger._sending.discard(oid)
    return SweepReport(**counts)


async def sweep_at_turns(ledger: DeliveryLedger, scope: Scope) -> SweepReport:
    """``schedule.concurrency`` workers take rows from a stream one page deep, which a
    reader fills page by page.

    Each row is claimed at its own turn (``Delivery.begin``), never a page ahead, so a crash
    marks only the rows whose sends had begun (ADR 0025). The workers resume together when
    a group commit wakes them, so their next claims share the next commit.
    """
    counts = dict.fromkeys(SweepReport.__slots__, 0)
    send_rows, receive_rows = anyio.create_memory_object_stream[Obligation](scope.limit)

    async def read_pages() -> None:
        async with send_rows:
            cursor = scope.after
            while True:
                page = await ledger.store.candidates(
                    dataclasses.replace(scope, after=cursor), now=ledger._clock()
                )
                for row in page:
                    await send_rows.send(row)
                if len(page) < scope.limit:
                    return
                cursor = (page[-1].created_at, page[-1].id)

    async def work(rows: anyio.abc.ObjectReceiveStream[Obligation]) -> None:
        async with rows:
            async for row in rows:
                outcome = await ledger._attempt(row)
                counts[outcome.kind] += 1
                counts["claimed"] += outcome.kind is not SweepOutcome.SKIPPED
                counts["marked"] += outcome.marked

    async with anyio.create_task_group() as group, receive_rows:
        group.start_soon(read_pages)
        for _ in range(ledger.schedule.concurrency):
            group.start_soon(work, receive_rows.clone())
    return SweepReport(**counts)
