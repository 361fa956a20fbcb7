"""Sweeps: sending every claimable row in a scope, and the outcome each attempt counts as.

``DeliveryLedger`` sweeps at the start (``boot_sweep``), after a platform reconnects, on a timer
and when an owner dies; the two ways of sweeping are here, so ``engine.py`` stays the ledger's
one-row path (record, claim, send, settle, resend on timers). They are the ledger's own methods
moved out of it, and use its state as its methods do: the ids it is sending now (a row in flight
here is never claimed twice) and its one-row ``_send`` and ``_attempt``.

- ``sweep_in_pages``: a page's rows claimed in one statement, the delivered ones settled in
  the commit that claims the next page (ADR 0110).
- ``sweep_at_turns`` (``deliver_begins``): each row claimed at its own turn, so a crash marks
  only the rows whose sends had begun (ADR 0025).
"""

from __future__ import annotations

import dataclasses
import enum
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio
import anyio.abc

from bridge_core.ledger.model import Obligation
from bridge_core.ledger.report import SweepReport
from bridge_core.ledger.schedule import Abandon, verdict_at_claim
from bridge_core.ledger.store import Scope
from bridge_core.provider import MessageRef

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


@dataclass(frozen=True, slots=True)
class Outcome:
    kind: SweepOutcome
    marked: bool = False
    row: Obligation | None = None  # the row as it ended, when known


Ready = tuple[Obligation, bool, bool]  # a claimed row, whether it is marked, poster alive
# the last part went out and the caller settles it (a batched sweep): told apart by identity
SENT = Outcome(SweepOutcome.DELIVERED)


async def sweep_in_pages(ledger: DeliveryLedger, scope: Scope) -> SweepReport:
    """Each page's rows are claimed in one statement, then sent in order by up to
    ``schedule.concurrency`` workers; the delivered ones are settled together, in the
    commit that claims the next page and reads the one after (ADR 0110).

    A crash after a page's claim leaves its rows ``attempting``: every one is resent at the
    next start, labelled as a possible duplicate, as a row claimed just before its send is.
    """
    counts = dict.fromkeys(SweepReport.__slots__, 0)
    sent: list[tuple[Obligation, MessageRef, bool]] = []  # last part sent, not yet settled

    async def settle_sent() -> None:
        done = sent[:]
        sent.clear()
        try:
            rows = await ledger.store.mark_delivered(
                [(row.id, row.fence, ref) for row, ref, _ in done], now=ledger._clock()
            )
        finally:
            for row, _, _ in done:
                ledger._sending.discard(row.id)
        for (row, _, marked), settled in zip(done, rows, strict=True):
            if not settled:
                log.warning("ledger: %s was taken over during its send; stopping", row.id)
            counts["delivered" if settled else "skipped"] += 1
            counts["claimed"] += 1
            counts["marked"] += marked

    async def abandon(row: Obligation, reason: str) -> None:
        gone = await ledger.store.abandon(row.id, fence=row.fence, now=now, reason=reason)
        if gone is not None:
            log.warning("ledger: abandoned %s: %s", row.id, reason)
        counts["abandoned" if gone is not None else "skipped"] += 1
        counts["claimed"] += gone is not None

    async def read(after: tuple[float, str]) -> None:
        page[:] = await ledger.store.candidates(
            dataclasses.replace(scope, after=after), now=ledger._clock()
        )

    try:
        page = await ledger.store.candidates(scope, now=ledger._clock())
        while page:
            now = ledger._clock()
            claims: list[tuple[Obligation, bool, bool]] = []  # row, marked, poster alive
            abandons: list[tuple[Obligation, str]] = []
            for row in page:
                if not ledger._connected(row.platform) or row.id in ledger._sending:
                    counts["skipped"] += 1
                    continue
                verdict = verdict_at_claim(row, now=now, schedule=ledger.schedule)
                if isinstance(verdict, Abandon):
                    abandons.append((row, verdict.reason))
                    continue
                claims.append((row, verdict.marked, row.owner == ledger.store.owner))
                ledger._sending.add(row.id)
            after = (page[-1].created_at, page[-1].id) if len(page) >= scope.limit else None
            page = []
            try:
                # one commit: the last page's settles, this page's claims, the next page's read
                async with anyio.create_task_group() as group:
                    if sent:
                        group.start_soon(settle_sent)
                    for row, reason in abandons:
                        group.start_soon(abandon, row, reason)
                    if after is not None:
                        group.start_soon(read, after)
                    held = await ledger.store.claim_many(
                        [(row.id, row.fence) for row, _, _ in claims], now=now
                    )
            except BaseException:
                for row, _, _ in claims:
                    ledger._sending.discard(row.id)
                raise
            ready = []
            for (row, marked, poster_alive), claimed in zip(claims, held, strict=True):
                if claimed is None:
                    ledger._sending.discard(row.id)
                    counts["skipped"] += 1
                else:
                    ready.append((claimed, marked, poster_alive))

            async def work(todo: Iterator[Ready], group: anyio.abc.TaskGroup, left: int) -> None:
                for claimed, marked, poster_alive in todo:
                    if left:  # the next worker starts when this one first waits (if it does)
                        group.start_soon(work, todo, group, left - 1)
                        left = 0
                    try:
                        outcome = await ledger._send(
                            claimed, marked=marked, poster_alive=poster_alive, sent=sent
                        )
                    except BaseException:
                        ledger._sending.discard(claimed.id)
                        raise
                    if outcome is SENT:
                        continue  # settled with the next commit
                    ledger._sending.discard(claimed.id)
                    counts[outcome.kind] += 1
                    counts["claimed"] += outcome.kind is not SweepOutcome.SKIPPED
                    counts["marked"] += outcome.marked

            todo = iter(ready)  # the workers share it: each row starts in order
            if ready:
                async with anyio.create_task_group() as group:
                    group.start_soon(work, todo, group, ledger.schedule.concurrency - 1)
        if sent:
            await settle_sent()
    finally:
        for row, _, _ in sent:  # cancelled or failed before their settle: not sending now
            ledger._sending.discard(row.id)
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
