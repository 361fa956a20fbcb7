"""``delivery_ledger = false``: the ledger's calls, with nothing recorded (ADR 0024)."""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable

import anyio
import anyio.abc

from bridge_core.ledger.inflight import RecordInFlight
from bridge_core.ledger.model import Deliver, Delivery, Obligation, Reply, State
from bridge_core.ledger.report import SweepReport
from bridge_core.ledger.rows import new_row
from bridge_core.ledger.statistics import LedgerStatistics

__all__ = ["DisabledLedger"]

log = logging.getLogger("bridge_core.ledger")


class DisabledLedger:
    """``delivery_ledger = false``: the same calls as ``DeliveryLedger``, nothing recorded.

    Each reply is sent once; a failed send is not retried and a crash loses the replies in
    flight. Right for a bot where a duplicate is unacceptable and a lost reply is acceptable.
    The rows it returns exist only in memory.
    """

    def __init__(self, *, deliver: Deliver, clock: Callable[[], float] = time.time) -> None:
        self._deliver = deliver
        self._clock = clock

    async def record(self, reply: Reply, *, claim: bool = False) -> tuple[Obligation, bool]:
        # nothing is kept, so every call creates its row (a repeated id is sent again); there
        # is no claim to make, so ``claim`` changes nothing
        return new_row(reply, owner=None, now=self._clock()), True

    def record_soon(self, reply: Reply) -> None:
        """Nothing to queue (nothing is kept): the caller records the usual way."""
        return None

    async def send_recorded(self, recording: RecordInFlight) -> Obligation | None:
        raise AssertionError("record_soon queues nothing here, so nothing is in flight")

    async def submit(self, reply: Reply) -> Obligation:
        row, _created = await self.record(reply)
        return await self.deliver_now(row)

    async def deliver_now(self, row: Obligation) -> Obligation:
        refs = []
        for part, body in enumerate(row.chunks):
            delivery = Delivery(
                obligation_id=row.id,
                profile=row.profile,
                platform=row.platform,
                channel=row.channel,
                thread=row.thread,
                reply_to=row.reply_to,
                body=body,
                marker=None,
                part=part,
                parts=len(row.chunks),
                fence=0,
                attempt=1,
                partial=row.partials[part] if part < len(row.partials) else None,
                poster_alive=True,
            )
            try:
                refs.append(await self._deliver(delivery))
            except Exception as error:
                log.warning("ledger disabled: reply %s lost: %r", row.id, error)
                return dataclasses.replace(
                    row, state=State.ABANDONED, attempts=1, last_error=repr(error)[:500]
                )
        return dataclasses.replace(row, state=State.DELIVERED, attempts=1, delivered=tuple(refs))

    async def boot_sweep(self) -> SweepReport:
        return SweepReport()

    def channel_proven(self, profile: str, channel: str) -> None:
        return None

    async def sweep_due(self) -> SweepReport:
        return SweepReport()

    async def redeliver_failed(self, platform: str) -> SweepReport:
        return SweepReport()

    async def prune(self) -> int:
        return 0

    async def counts_by_state(self) -> dict[State, int]:
        return dict.fromkeys(State, 0)

    async def statistics(self) -> LedgerStatistics:
        return LedgerStatistics.of({}, timers=0)

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        task_status.started()
        await anyio.sleep(math.inf)
