"""The delivery ledger: record before sending, claim by compare-and-swap, resend on schedule.

``DeliveryLedger`` is given a store and a delivery function. It decides nothing about the
schedule itself (``schedule.py`` does) and knows no provider: errors are read through
``bridge_core.provider.reading_for``. Time for waiting comes from anyio (virtual in tests);
stored timestamps and ages come from ``clock``, by default the store's own clock
(``LedgerStore.now``: the database's for PostgreSQL), so every gateway judges a row's age alike.
Sweeping many rows at once (at the start, after a reconnect, on a timer) is ``sweeps.py``'s.
"""

from __future__ import annotations

import heapq
import logging
import math
from collections.abc import Awaitable, Callable, Collection
from functools import partial

import anyio
import anyio.abc

from bridge_core.ledger.inflight import RecordInFlight
from bridge_core.ledger.model import (
    ClaimLost,
    Deliver,
    Delivery,
    Obligation,
    Reply,
    State,
    part_delivery,
)
from bridge_core.ledger.report import SweepReport
from bridge_core.ledger.schedule import (
    Abandon,
    Schedule,
    after_failure,
    marker_for,
    verdict_at_claim,
)
from bridge_core.ledger.statistics import LedgerStatistics
from bridge_core.ledger.store import CLAIMABLE_STATES, LedgerStore, Scope
from bridge_core.ledger.sweeps import SENT, Outcome, SweepOutcome, sweep_at_turns, sweep_in_pages
from bridge_core.ledger.turn import ClaimOnBegin
from bridge_core.provider import LedgerAction, MessageRef, ProviderError, reading_for

__all__ = ["DeliveryLedger", "SweepOutcome", "SweepReport"]

log = logging.getLogger("bridge_core.ledger")


class DeliveryLedger:
    """At-least-once delivery of replies, with possible duplicates labelled.

    ``profiles``: the bot profiles this process serves; it claims only their rows.
    ``connected``: whether a platform is connected now; rows of a disconnected platform are
    left alone (they keep their attempts) until ``redeliver_failed(platform)``.
    ``deliver_begins``: ``deliver`` awaits ``delivery.begin()`` right before its platform call,
    after any wait for the channel's turn (a paced sender), and the row is claimed there rather
    than before ``deliver`` is called. A reply still queued behind its channel's pacing when
    the process dies is then ``pending``, not ``attempting``, and goes out clean after the
    restart instead of labelled as a possible duplicate.
    """

    def __init__(
        self,
        store: LedgerStore,
        *,
        deliver: Deliver,
        profiles: Collection[str],
        connected: Callable[[str], bool] = lambda platform: True,
        schedule: Schedule | None = None,
        clock: Callable[[], float] | None = None,
        deliver_begins: bool = False,
    ) -> None:
        if not profiles:
            raise ValueError("DeliveryLedger needs at least one profile to serve")
        self.store = store
        self._deliver = deliver
        self.profiles = frozenset(profiles)
        self._connected = connected
        self.schedule = schedule if schedule is not None else Schedule()
        self._clock = clock if clock is not None else store.now
        self._deliver_begins = deliver_begins
        self._timers: list[tuple[float, str, int]] = []  # (due on anyio's clock, id, fence)
        self._wake: anyio.Event | None = None  # set while the timer task waits
        # Ids this ledger is sending now: a second attempt at one of them (``deliver_now`` on a
        # row already in flight here) would pass the claim (this owner may claim its own rows)
        # and send a second, labelled copy.
        self._sending: set[str] = set()
        # Replies this process left ``failed`` with no timer (their in-process resends spent, or
        # Forbidden), by (profile, channel): id -> fence. Their last attempt is due at the next
        # start or when the channel proves healthy here, whichever comes first (ADR 0029).
        self._parked: dict[tuple[str, str], dict[str, int]] = {}
        self._dead_seen: set[str] = set()  # dead owners whose rows a sweep already looked at
        # Rows ``record(claim=True)`` recorded already claimed, id -> fence: ``deliver_now`` sends
        # them under that claim (their first part's ``begin()`` has nothing left to claim).
        self._begun: dict[str, int] = {}

    # ------------------------------------------------------------------ recording and sending

    def _check_profile(self, reply: Reply) -> None:
        if reply.profile not in self.profiles:
            raise ValueError(
                f"reply {reply.obligation_id!r} is for profile {reply.profile!r}, but this "
                f"ledger serves {sorted(self.profiles)}: record it in that profile's gateway"
            )

    async def record(self, reply: Reply, *, claim: bool = False) -> tuple[Obligation, bool]:
        """Record ``reply`` durably (as ``pending``); an already recorded id returns its row.
        The boolean says whether this call created the row: only its creator sends it.

        ``claim``: the caller hands the new row to ``deliver_now`` at once and its send would
        not wait (the gateway asks this of an idle channel), so the row is recorded already
        claimed, in the same commit (ADR 0121); a row of a disconnected platform is recorded
        ``pending`` as without it."""
        self._check_profile(reply)
        claim = claim and self._connected(reply.platform)
        row, created = await self.store.record(reply, now=self._clock(), claimed=claim)
        if created and claim:
            self._begun[row.id] = row.fence
        return row, created

    def record_soon(self, reply: Reply) -> RecordInFlight | None:
        """Queue ``reply``'s record, claimed, without waiting for its commit, for
        ``send_recorded`` to send as soon as the commit returns (ADR 0164): what
        ``record(reply, claim=True)`` then ``deliver_now`` do, with the send handed to the
        delivery function while the record commits. ``None`` (nothing queued: record the usual
        way) unless the delivery function awaits ``begin()`` before its platform call
        (``deliver_begins``), which is where the send waits for the commit, the platform is
        connected, and the store can queue a record (SQLite on asyncio)."""
        if not self._deliver_begins:
            return None
        self._check_profile(reply)
        queue = getattr(self.store, "record_soon", None)
        if queue is None or not self._connected(reply.platform):
            return None
        recording: RecordInFlight | None = queue(reply, now=self._clock(), claimed=True)
        return recording

    async def send_recorded(self, recording: RecordInFlight) -> Obligation | None:
        """Send the row ``record_soon`` queued, once its record is durable: its first part's
        ``begin()`` waits for the record's commit and lets the send go only if that commit
        created the row (a row recorded before is not this call's to send). Returns the row as
        it ended, or ``None`` when nothing was sent here (recorded before, or the record failed:
        its error is the waiter's of ``committed()``)."""
        row = recording.fresh
        if row.id in self._sending:  # a row of this id is on its way here: this record is not
            await self._recorded_here(recording)
            return None

        async def begin() -> None:
            _, created = await recording.committed(first=True)
            if not created:
                raise ClaimLost(f"reply {row.id!r} was recorded before; not this call's to send")

        async def deliver(delivery: Delivery) -> MessageRef:
            try:
                return await self._deliver(delivery)
            except Exception:
                # refused before its begin(): whose failure it is depends on the record
                if not await self._recorded_here(recording):
                    raise ClaimLost(f"reply {row.id!r} was not recorded by this call") from None
                raise

        self._sending.add(row.id)
        try:
            outcome = await self._send(
                row, marked=False, poster_alive=True, begun=True, first_begin=begin, via=deliver
            )
        except Exception:
            log.exception("ledger: delivering %s failed in the ledger itself", row.id)
            return None
        finally:
            self._sending.discard(row.id)
        return outcome.row

    @staticmethod
    async def _recorded_here(recording: RecordInFlight) -> bool:
        try:
            _, created = await recording.committed()
        except Exception:
            return False
        return created

    async def submit(self, reply: Reply) -> Obligation:
        """Record ``reply``, then send it at once; returns the row as it ended.

        Recording again an id that exists sends nothing: the row is whoever recorded it first's.
        A ledger that claims before ``deliver`` records the row already claimed, in the same
        commit (the claim would follow at once; ADR 0121); one that claims at the turn records
        it ``pending`` and claims it in ``delivery.begin()``.
        """
        # ``record``'s work in this frame (ADR 0170): every await of the reply's record and
        # settle resumes each coroutine between here and the writer's future.
        self._check_profile(reply)
        claim = not self._deliver_begins and self._connected(reply.platform)
        row, created = await self.store.record(reply, now=self._clock(), claimed=claim)
        if not created:
            return row
        return await self._deliver_row(row, begun=claim)

    async def deliver_now(self, row: Obligation) -> Obligation:
        """Claim ``row`` (as read, by its fence) and send it; returns the row as it ended, or as
        it is when another claimer got there first.

        A failure of the store itself (the database went away mid-send) is logged, not raised:
        the row is as durable as its last commit, and the sweeps (or the next start, for a row
        left attempting) take it from there. The runtime calls this in background tasks, where
        an exception would stop the gateway.
        """
        return await self._deliver_row(row, begun=self._begun.pop(row.id, None) == row.fence)

    async def _deliver_row(self, row: Obligation, *, begun: bool) -> Obligation:
        """``deliver_now``'s work, and ``submit``'s once it recorded: ``begun``, a row recorded
        already claimed (``record(claim=True)``), is sent under that claim: clean (it was never
        sent before), posted by this process, its first part's ``begin()`` a no-op. It goes even
        if its platform disconnected since: a held row left unsent would wait for the next
        start; a failed send is resent on schedule."""
        try:
            if begun:
                self._sending.add(row.id)
                try:
                    outcome = await self._send(row, marked=False, poster_alive=True, begun=True)
                finally:
                    self._sending.discard(row.id)
            else:
                outcome = await self._attempt(row)
            if outcome.row is not None:
                return outcome.row
            current = await self.store.get(row.id)
        except Exception:
            log.exception("ledger: delivering %s failed in the ledger itself", row.id)
            return row
        return current if current is not None else row

    async def _attempt(self, row: Obligation) -> Outcome:
        """Claim and send one row."""
        if not self._connected(row.platform) or row.id in self._sending:
            return Outcome(SweepOutcome.SKIPPED)
        now = self._clock()
        verdict = verdict_at_claim(row, now=now, schedule=self.schedule)
        if isinstance(verdict, Abandon):
            gone = await self.store.abandon(row.id, fence=row.fence, now=now, reason=verdict.reason)
            if gone is not None:
                log.warning("ledger: abandoned %s: %s", row.id, verdict.reason)
                return Outcome(SweepOutcome.ABANDONED, row=gone)
            return Outcome(SweepOutcome.SKIPPED)
        # the row's owner, as read before the claim, is the process that recorded it: the one
        # that posted a streamed reply's partial messages
        poster_alive = row.owner == self.store.owner
        self._sending.add(row.id)
        try:
            if self._deliver_begins:
                held: Obligation | ClaimOnBegin = ClaimOnBegin(self.store, self._clock, row)
            else:
                claimed = await self.store.claim(row.id, fence=row.fence, now=now)
                if claimed is None:
                    return Outcome(SweepOutcome.SKIPPED)
                held = claimed
            return await self._send(held, marked=verdict.marked, poster_alive=poster_alive)
        finally:
            self._sending.discard(row.id)

    async def _send(
        self,
        held: Obligation | ClaimOnBegin,
        *,
        marked: bool,
        poster_alive: bool = False,
        sent: list[tuple[str, int, MessageRef, bool]] | None = None,
        begun: bool = False,
        first_begin: Callable[[], Awaitable[None]] | None = None,
        via: Deliver | None = None,
    ) -> Outcome:
        """Send the row's undelivered parts. ``held`` is the row as claimed, or a claim that the
        first part's ``begin()`` makes; the later parts go out under the same claim (with
        ``deliver_begins``, each later part's ``begin()`` proves it still holds).

        With ``sent`` (a batched sweep), the last part's settle is left to the caller: the
        row's id and fence, its ref and ``marked`` go to ``sent`` and the outcome is ``SENT``.
        ``begun``: the row was claimed by its record, and its first part's ``begin()`` proves
        nothing more, or runs ``first_begin`` (the record's commit awaited, ADR 0164). ``via``:
        the delivery function in place of the ledger's."""
        claim = held if isinstance(held, ClaimOnBegin) else None
        row = held.row if isinstance(held, ClaimOnBegin) else held
        first = len(row.delivered)
        parts = len(row.chunks)
        current: Obligation | None = row
        deliver = self._deliver if via is None else via
        for part in range(first, parts):
            # the first part's begin() claims; each later one's proves the claim still holds
            on_begin: Callable[[], Awaitable[None]] | None = None
            if claim is not None:
                on_begin = claim.begin
            elif first_begin is not None and part == first:
                on_begin = first_begin
            elif self._deliver_begins and not (begun and part == first):
                on_begin = partial(self._confirm_held, row)
            delivery = part_delivery(
                row,
                part,
                marker_for(first_part=first) if marked and part == first else None,
                claim is not None,
                on_begin,
                poster_alive,
            )
            try:
                ref = await deliver(delivery)
            except ClaimLost:
                return Outcome(SweepOutcome.SKIPPED)
            except Exception as error:
                if claim is not None and claim.claimed is None:
                    return await self._refused_before_turn(row, error)
                if not isinstance(error, ProviderError):  # unclassified: reads as transient
                    log.exception("ledger: delivery of %s raised a non-provider error", row.id)
                return await self._failed(row if claim is None else claim.held, error, marked)
            if claim is not None:
                if claim.claimed is None and not await self._claim_late(claim):
                    return Outcome(SweepOutcome.SKIPPED, marked)
                row = claim.held
                claim = None
            now = self._clock()
            if part + 1 < parts:
                current = await self.store.progress(row.id, fence=row.fence, ref=ref, now=now)
            elif sent is not None:
                sent.append((row.id, row.fence, ref, marked))
                return SENT
            else:
                current = await self.store.settle(
                    row.id, fence=row.fence, state=State.DELIVERED, now=now, ref=ref
                )
            if current is None:
                log.warning("ledger: %s was taken over during its send; stopping", row.id)
                return Outcome(SweepOutcome.SKIPPED, marked)
        return Outcome(SweepOutcome.DELIVERED, marked, current)

    async def _confirm_held(self, row: Obligation) -> None:
        """``begin()`` of a later part: prove the claim still holds right before that part goes
        out, as the first part's claim did. Each part waits for its own turn, and a process
        paused past its lease meanwhile may have been recovered from; it must not send on."""
        held = await self.store.prove_claim(row.id, fence=row.fence, now=self._clock())
        if held is None:
            raise ClaimLost(f"reply {row.id!r} was taken over while its next part waited")

    async def _refused_before_turn(self, row: Obligation, error: BaseException) -> Outcome:
        """``deliver`` failed before its ``begin()``: nothing reached the platform, so the row
        stays as it was (clean) and is tried again after the first resend delay (an unhealthy
        channel, a stopping sender), or abandoned when the error says it never can be sent."""
        if reading_for(error).ledger is LedgerAction.ABANDON:
            now = self._clock()
            reason = f"{type(error).__name__}: {error}"[:500]
            gone = await self.store.abandon(row.id, fence=row.fence, now=now, reason=reason)
            if gone is None:
                return Outcome(SweepOutcome.SKIPPED)
            log.warning("ledger: abandoned %s before its send: %s", row.id, reason)
            return Outcome(SweepOutcome.ABANDONED, row=gone)
        # debug: the sender logs the channel's state once; a row a minute each would drown it
        log.debug("ledger: %s was refused before its send (%r); will try again", row.id, error)
        if self.schedule.resend_delays:
            self._add_timer(self.schedule.resend_delays[0], row.id, row.fence)
        return Outcome(SweepOutcome.FAILED, row=row)

    async def _claim_late(self, claim: ClaimOnBegin) -> bool:
        """``deliver`` sent without awaiting ``begin()`` (a bug of the delivery function): claim
        now, so the row is still settled rather than sent again."""
        log.error(
            "ledger: the delivery function sent %s without awaiting delivery.begin(); a ledger "
            "built with deliver_begins=True needs it right before the platform call",
            claim.row.id,
        )
        try:
            await claim.begin()
        except ClaimLost:
            log.warning("ledger: %s was claimed elsewhere while sent unclaimed", claim.row.id)
            return False
        return True

    def _add_timer(self, delay: float, obligation: str, fence: int) -> None:
        heapq.heappush(self._timers, (anyio.current_time() + delay, obligation, fence))
        if self._wake is not None:
            self._wake.set()

    async def _failed(self, row: Obligation, error: BaseException, marked: bool) -> Outcome:
        now = self._clock()
        change = after_failure(row, error, now=now, schedule=self.schedule)
        settled = await self.store.settle(
            row.id,
            fence=row.fence,
            state=change.state,
            now=now,
            next_attempt_at=change.next_attempt_at,
            penalty=change.penalty,
            last_error=change.last_error,
        )
        if settled is None:
            return Outcome(SweepOutcome.SKIPPED, marked)
        if change.state is State.ABANDONED:
            log.warning("ledger: abandoned %s: %s", row.id, change.last_error)
            return Outcome(SweepOutcome.ABANDONED, marked, settled)
        if change.in_process and change.next_attempt_at is not None:
            self._add_timer(max(0.0, change.next_attempt_at - now), row.id, row.fence)
        elif change.next_attempt_at is None:
            self._parked.setdefault((row.profile, row.channel), {})[row.id] = settled.fence
        return Outcome(SweepOutcome.FAILED, marked, settled)

    def channel_proven(self, profile: str, channel: str) -> None:
        """Profile ``profile``'s ``channel`` just took a send (or passed a probe) here: each reply
        this process parked for it gets its attempt now rather than at the next start. Cheap
        and synchronous (the channel's sender calls it after every success): it only starts
        timers, and a timer resends a row only if its fence is still the one parked."""
        parked = self._parked.pop((profile, channel), None)
        if parked:
            log.info(
                "ledger: channel %s/%s is sending again; %d parked repl%s get their last "
                "attempt now",
                profile,
                channel,
                len(parked),
                "y" if len(parked) == 1 else "ies",
            )
            for obligation, fence in parked.items():
                self._add_timer(0.0, obligation, fence)

    # ------------------------------------------------------------------ sweeps

    async def _sweep(self, scope: Scope) -> SweepReport:
        """Claim and send every row in ``scope``. With ``deliver_begins`` each row is claimed at
        its own turn (``sweep_at_turns``); otherwise page by page (``sweep_in_pages``)."""
        if self._deliver_begins:
            return await sweep_at_turns(self, scope)
        return await sweep_in_pages(self, scope)

    async def boot_sweep(self) -> SweepReport:
        """Before serving: resend the rows dead owners left (pending, attempting, failed), those
        due now; rows still waiting for a timer are picked up by ``run`` when it fires."""
        return await self._sweep(
            Scope(
                owners="dead",
                states=CLAIMABLE_STATES,
                due="due_or_unset",
                profiles=self.profiles,
            )
        )

    async def redeliver_failed(self, platform: str) -> SweepReport:
        """After ``platform`` reconnected: resend its failed rows now (this process's and dead
        owners'), except those still waiting out a rate-limit penalty."""
        return await self._sweep(
            Scope(
                owners="mine_or_dead",
                states=(State.FAILED,),
                due="not_waiting_penalty",
                profiles=self.profiles,
                platforms=(platform,),
            )
        )

    async def sweep_due(self) -> SweepReport:
        """Rows whose timers expired (this process's, e.g. after a timer was lost) and every row
        a dead owner left. ``run`` calls this every ``schedule.sweep_interval``."""
        mine = await self._sweep(
            Scope(
                owners="mine",
                states=(State.PENDING, State.FAILED),
                due="due",
                profiles=self.profiles,
            )
        )
        dead = await self.boot_sweep()
        return mine + dead

    async def watch_deaths(self) -> SweepReport:
        """Sweep the rows of dead owners as soon as the store sees a new one die (its lease
        expired; its process is gone), rather than at the next periodic sweep (ADR 0019)."""
        dead = await self.store.dead_owners()
        new = dead - self._dead_seen
        self._dead_seen = dead  # an owner whose rows are all taken is no longer listed
        if not new:
            return SweepReport()
        report = await self.boot_sweep()
        log.info(
            "ledger: %d owner(s) died (%s); took over their rows: %s",
            len(new),
            sorted(new)[:3],
            report,
        )
        return report

    async def prune(self) -> int:
        """Delete delivered rows older than ``schedule.keep_delivered``."""
        return await self.store.prune(delivered_before=self._clock() - self.schedule.keep_delivered)

    async def counts_by_state(self) -> dict[State, int]:
        """Rows of this process's profiles by state (for metrics)."""
        return await self.store.counts_by_state(profiles=self.profiles)

    async def statistics(self) -> LedgerStatistics:
        """Its rows by state and its pending timers, as one snapshot."""
        return LedgerStatistics.of(await self.counts_by_state(), timers=self.timers)

    # ------------------------------------------------------------------ the loop

    async def _resend(self, obligation: str, fence: int) -> None:
        """A timer fired: resend the row if it is still as the timer left it."""
        try:
            row = await self.store.get(obligation)
            if row is None or row.fence != fence or row.state.final:
                return
            if row.state is State.ATTEMPTING:
                return
            await self._attempt(row)
        except Exception:
            log.exception("ledger: resend of %s failed in the ledger itself", obligation)

    async def _serve_timers(self, group: anyio.abc.TaskGroup) -> None:
        while True:
            now = anyio.current_time()
            while self._timers and self._timers[0][0] <= now:
                _due, obligation, fence = heapq.heappop(self._timers)
                group.start_soon(self._resend, obligation, fence)
            self._wake = anyio.Event()
            wait = self._timers[0][0] - now if self._timers else math.inf
            with anyio.move_on_after(wait):
                await self._wake.wait()

    async def _every(
        self, interval: float, work: Callable[[], Awaitable[object]], what: str
    ) -> None:
        while True:
            try:
                await work()
            except Exception:
                log.exception("ledger: %s failed; will try again in %.0f s", what, interval)
            await anyio.sleep(interval)

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Serve the in-process timers, sweep for due and orphaned rows, prune, renew the lease.

        Runs until cancelled; each duty is its own task, so a long sweep never delays a lease
        renewal or a timer. Call ``boot_sweep`` first (the runtime does, before serving).
        """
        async with anyio.create_task_group() as group:
            renew_interval = self.store.renew_interval
            if renew_interval is not None:
                group.start_soon(self._every, renew_interval, self.store.renew, "lease renewal")
            group.start_soon(self._every, self.schedule.prune_interval, self.prune, "pruning")
            group.start_soon(self._serve_timers, group)
            group.start_soon(self._every, self.schedule.death_watch, self.watch_deaths, "watch")

            async def sweep() -> None:
                await anyio.sleep(self.schedule.sweep_interval)
                await self._every(self.schedule.sweep_interval, self.sweep_due, "periodic sweep")

            group.start_soon(sweep)
            task_status.started()

    @property
    def timers(self) -> int:
        """How many in-process resend timers are pending."""
        return len(self._timers)
