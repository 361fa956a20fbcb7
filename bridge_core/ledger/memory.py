"""A ledger store in memory: for tests, embedding experiments and virtual-time runs.

Nothing survives the process; several ``MemoryLedgerStore`` objects sharing one
``MemoryBackend`` play several processes on one shared ledger (``backend.kill(owner)`` plays a
crash). It follows the same protocol and passes the same test suite as the durable stores.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Collection, Sequence

from bridge_core.ledger.model import Obligation, Reply, State
from bridge_core.ledger.rows import new_row
from bridge_core.ledger.store import Scope
from bridge_core.provider import MessageRef

__all__ = ["MemoryBackend", "MemoryLedgerStore"]


class MemoryBackend:
    """The shared rows and the set of live owners."""

    def __init__(self) -> None:
        self.rows: dict[str, Obligation] = {}
        self.live: set[str] = set()

    def kill(self, owner: str) -> None:
        """Play a crash of ``owner``: its rows become claimable by others."""
        self.live.discard(owner)


def in_scope(row: Obligation, scope: Scope, *, me: str, live: Collection[str], now: float) -> bool:
    if row.state not in scope.states or row.profile not in scope.profiles:
        return False
    if scope.platforms is not None and row.platform not in scope.platforms:
        return False
    mine = row.owner == me
    dead = row.owner is None or (row.owner not in live and row.owner != me)
    if scope.owners == "mine" and not mine:
        return False
    if scope.owners == "dead" and not dead:
        return False
    if scope.owners == "mine_or_dead" and not (mine or dead):
        return False
    due_now = row.next_attempt_at is not None and row.next_attempt_at <= now
    if scope.due == "due" and not due_now:
        return False
    if scope.due == "due_or_unset" and not (due_now or row.next_attempt_at is None):
        return False
    if scope.due == "not_waiting_penalty" and row.penalty and not due_now:
        return False
    return scope.after is None or (row.created_at, row.id) > scope.after


class MemoryLedgerStore:
    def __init__(self, backend: MemoryBackend | None = None, *, owner: str = "memory|1|0") -> None:
        self.backend = backend if backend is not None else MemoryBackend()
        self._owner = owner

    @property
    def owner(self) -> str:
        return self._owner

    def now(self) -> float:
        return time.time()

    @property
    def renew_interval(self) -> float | None:
        return None  # liveness is read from the process itself, not from a lease

    @property
    def location(self) -> str:
        return "memory"

    async def open(self) -> None:
        self.backend.live.add(self._owner)

    async def aclose(self) -> None:
        return None

    async def renew(self) -> None:
        return None

    async def dead_owners(self) -> set[str]:
        live = self.backend.live
        return {
            row.owner
            for row in self.backend.rows.values()
            if row.owner is not None and not row.state.final and row.owner not in live
        }

    async def record(
        self, reply: Reply, *, now: float, claimed: bool = False
    ) -> tuple[Obligation, bool]:
        existing = self.backend.rows.get(reply.obligation_id)
        if existing is not None:
            return existing, False
        row = new_row(reply, owner=self._owner, now=now, claimed=claimed)
        self.backend.rows[row.id] = row
        return row, True

    async def get(self, obligation_id: str) -> Obligation | None:
        return self.backend.rows.get(obligation_id)

    async def candidates(self, scope: Scope, *, now: float) -> list[Obligation]:
        live = self.backend.live
        found = [
            row
            for row in self.backend.rows.values()
            if in_scope(row, scope, me=self._owner, live=live, now=now)
        ]
        found.sort(key=lambda row: (row.created_at, row.id))
        return found[: scope.limit]

    def _replace(self, row: Obligation, **changes: object) -> Obligation:
        new = dataclasses.replace(row, **changes)  # type: ignore[arg-type]
        self.backend.rows[row.id] = new
        return new

    async def claim(self, obligation_id: str, *, fence: int, now: float) -> Obligation | None:
        row = self.backend.rows.get(obligation_id)
        if row is None or row.fence != fence or row.state.final:
            return None
        if row.owner not in (None, self._owner) and row.owner in self.backend.live:
            return None  # a live owner's row is never taken
        spends = row.attempts > 0 and not row.penalty
        return self._replace(
            row,
            state=State.ATTEMPTING,
            owner=self._owner,
            fence=row.fence + 1,
            attempts=row.attempts + 1,
            resends=row.resends + (1 if spends else 0),
            penalty=False,
            next_attempt_at=None,
            updated_at=now,
        )

    async def claim_many(
        self, items: Sequence[tuple[str, int]], *, now: float
    ) -> list[Obligation | None]:
        return [
            await self.claim(obligation_id, fence=fence, now=now) for obligation_id, fence in items
        ]

    async def mark_delivered(
        self, items: Sequence[tuple[str, int, MessageRef]], *, now: float
    ) -> list[bool]:
        return [
            await self.settle(oid, fence=fence, state=State.DELIVERED, now=now, ref=ref) is not None
            for oid, fence, ref in items
        ]

    async def abandon(
        self, obligation_id: str, *, fence: int, now: float, reason: str
    ) -> Obligation | None:
        row = self.backend.rows.get(obligation_id)
        if row is None or row.fence != fence or row.state.final:
            return None
        return self._replace(
            row,
            state=State.ABANDONED,
            fence=row.fence + 1,
            last_error=reason,
            next_attempt_at=None,
            penalty=False,
            updated_at=now,
        )

    def _held(self, obligation_id: str, fence: int) -> Obligation | None:
        row = self.backend.rows.get(obligation_id)
        if (
            row is None
            or row.fence != fence
            or row.owner != self._owner
            or row.state is not State.ATTEMPTING
        ):
            return None
        return row

    async def progress(
        self, obligation_id: str, *, fence: int, ref: MessageRef, now: float
    ) -> Obligation | None:
        row = self._held(obligation_id, fence)
        if row is None:
            return None
        return self._replace(row, delivered=(*row.delivered, ref), updated_at=now)

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
        row = self._held(obligation_id, fence)
        if row is None:
            return None
        return self._replace(
            row,
            state=state,
            next_attempt_at=next_attempt_at,
            penalty=penalty,
            last_error=last_error if last_error is not None else row.last_error,
            delivered=row.delivered if ref is None else (*row.delivered, ref),
            updated_at=now,
        )

    async def prove_claim(self, obligation_id: str, *, fence: int, now: float) -> Obligation | None:
        return await self.settle(obligation_id, fence=fence, state=State.ATTEMPTING, now=now)

    async def counts_by_state(self, *, profiles: Collection[str] | None = None) -> dict[State, int]:
        counts = dict.fromkeys(State, 0)
        for row in self.backend.rows.values():
            if profiles is None or row.profile in profiles:
                counts[row.state] += 1
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
        found = [
            row
            for row in self.backend.rows.values()
            if (states is None or row.state in states)
            and (channel is None or row.channel == channel)
            and (created_before is None or row.created_at < created_before)
            and (created_after is None or row.created_at > created_after)
        ]
        found.sort(key=lambda row: (row.created_at, row.id), reverse=True)
        return found[:limit]

    async def retry(self, obligation_id: str, *, now: float) -> Obligation | None:
        row = self.backend.rows.get(obligation_id)
        if row is None or row.state is not State.ABANDONED:
            return None
        return self._replace(
            row,
            state=State.PENDING,
            fence=row.fence + 1,
            resends=0,
            created_at=now,
            updated_at=now,
            next_attempt_at=None,
            penalty=False,
            owner=None,
        )

    async def purge(self, *, states: Collection[State], created_before: float | None = None) -> int:
        doomed = [
            row.id
            for row in self.backend.rows.values()
            if row.state in states
            and row.state.final
            and (created_before is None or row.created_at < created_before)
        ]
        for key in doomed:
            del self.backend.rows[key]
        return len(doomed)

    async def prune(self, *, delivered_before: float) -> int:
        doomed = [
            row.id
            for row in self.backend.rows.values()
            if row.state is State.DELIVERED and row.updated_at < delivered_before
        ]
        for key in doomed:
            del self.backend.rows[key]
        return len(doomed)
