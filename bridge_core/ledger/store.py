"""The protocol every ledger store implements, and the selection of rows a sweep may claim.

A store keeps rows and answers a few questions atomically; it makes no decision about the
schedule (``schedule.py`` does). Every change of a claimed row is conditioned on the fence the
claimer holds; a claim is a compare-and-swap on the fence it read, so two claimers of one row
cannot both win, whatever the store.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from bridge_core.ledger.model import Obligation, Reply, State
from bridge_core.provider import MessageRef

__all__ = ["CLAIMABLE_STATES", "LedgerStore", "Scope"]

CLAIMABLE_STATES: tuple[State, ...] = (State.PENDING, State.ATTEMPTING, State.FAILED)


@dataclass(frozen=True, slots=True)
class Scope:
    """Which rows a sweep looks at.

    ``owners``: ``"dead"`` rows whose owner is dead (or unset), never a live process's;
    ``"mine"`` this process's rows; ``"mine_or_dead"`` both.
    ``due``: ``"due"`` only rows with a timer that has expired (``next_attempt_at <= now``);
    ``"due_or_unset"`` also rows without a timer; ``"not_waiting_penalty"`` everything except
    rows still waiting out a rate-limit penalty.
    ``after`` is a keyset cursor ``(created_at, id)`` for paging in creation order.
    """

    owners: Literal["dead", "mine", "mine_or_dead"]
    states: tuple[State, ...]
    due: Literal["due", "due_or_unset", "not_waiting_penalty"]
    profiles: Collection[str]
    platforms: Collection[str] | None = None
    after: tuple[float, str] | None = None
    limit: int = 500


@runtime_checkable
class LedgerStore(Protocol):
    """Where rows live. SQLite (``sqlite.py``), PostgreSQL (``postgres.py``), memory (tests)."""

    @property
    def owner(self) -> str:
        """This process's owner id, stamped on the rows it claims."""
        ...

    @property
    def location(self) -> str:
        """Where the rows are (a path or a URL without its password), for messages."""
        ...

    def now(self) -> float:
        """The store's clock, in epoch seconds: every timestamp a row carries and every age
        judged of it (the 24 h freshness, timers, pruning) reads this one clock, so gateways on
        hosts whose clocks disagree still agree on a row's age (ADR 0018). The database's
        clock for PostgreSQL (like its leases); the host's for SQLite and memory, whose
        ledgers belong to one host."""
        ...

    @property
    def renew_interval(self) -> float | None:
        """How often ``renew`` must run (``None``: never, ownership needs no renewal)."""
        ...

    async def open(self) -> None:
        """Create the schema if needed and register this process as a live owner."""
        ...

    async def aclose(self) -> None: ...

    async def renew(self) -> None:
        """Keep this process's ownership alive (a lease renewal where the store has leases)."""
        ...

    async def dead_owners(self) -> set[str]:
        """Owners known to this ledger that are dead now and may hold open rows (PostgreSQL: an
        expired lease; SQLite and memory: the owner of an open row whose process is gone). The
        ledger sweeps when a new one appears, so a dead gateway's replies move at once."""
        ...

    async def record(
        self, reply: Reply, *, now: float, claimed: bool = False
    ) -> tuple[Obligation, bool]:
        """Durably record ``reply`` as ``pending``; an existing id is left alone and returned.
        The boolean says whether this call created the row.

        ``claimed``: a new row is recorded as its first claim by this owner would leave it
        (``attempting``, fence 1, one attempt), in the same commit, for a caller about to send
        it (ADR 0121). An existing id is still returned as it is, claimed by nobody here."""
        ...

    async def get(self, obligation_id: str) -> Obligation | None: ...

    async def candidates(self, scope: Scope, *, now: float) -> list[Obligation]:
        """Rows in ``scope``, oldest first, at most ``scope.limit``."""
        ...

    async def claim(self, obligation_id: str, *, fence: int, now: float) -> Obligation | None:
        """If the row still has ``fence`` and is not final: set ``attempting``, stamp this owner,
        bump the fence and attempts (and resends when the claim spends one); return the row after
        the claim, else ``None``."""
        ...

    async def claim_many(
        self, items: Sequence[tuple[str, int]], *, now: float
    ) -> list[Obligation | None]:
        """``claim`` for many ``(id, fence)`` at once, in one statement and one commit where the
        store can: each item is its own compare-and-swap, exactly as ``claim``; one result per
        item, in order. A sweep claims a page of rows with it before sending them in order
        (ADR 0110)."""
        ...

    async def abandon(
        self, obligation_id: str, *, fence: int, now: float, reason: str
    ) -> Obligation | None:
        """Compare-and-swap on ``fence``: mark the row abandoned (bumps the fence)."""
        ...

    async def progress(
        self, obligation_id: str, *, fence: int, ref: MessageRef, now: float
    ) -> Obligation | None:
        """Append a delivered part's ref to the row this owner holds with ``fence``; returns the
        row after the change, ``None`` when the fence moved on and nothing changed."""
        ...

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
        """End this owner's claim (``fence``): delivered (appending ``ref``), failed or abandoned
        (``state=ATTEMPTING`` is ``prove_claim``).
        Returns the row after the change; ``None`` when the fence moved on (another process took
        the row) and nothing changed."""
        ...

    async def prove_claim(self, obligation_id: str, *, fence: int, now: float) -> Obligation | None:
        """Prove this owner's claim (``fence``) still holds, keeping it (``attempting``, only
        ``updated_at`` moves): the ledger does this before each later part of a reply sent at
        its turn. The row, or ``None`` when the fence moved on (the claim is lost)."""
        ...

    async def mark_delivered(
        self, items: Sequence[tuple[str, int, MessageRef]], *, now: float
    ) -> list[bool]:
        """``settle(id, fence=fence, state=DELIVERED, ref=ref)`` for many ``(id, fence, ref)`` at
        once, in one statement and one commit where the store can; for each item, whether it
        was settled (``False``: the fence moved on and nothing changed)."""
        ...

    async def counts_by_state(
        self, *, profiles: Collection[str] | None = None
    ) -> dict[State, int]: ...

    async def rows(
        self,
        *,
        states: Collection[State] | None = None,
        channel: str | None = None,
        created_before: float | None = None,
        created_after: float | None = None,
        limit: int = 100,
    ) -> list[Obligation]:
        """Rows for people to read, newest first."""
        ...

    async def retry(self, obligation_id: str, *, now: float) -> Obligation | None:
        """An abandoned row back to ``pending`` with a fresh budget (bumps the fence).
        ``None`` when there is no such abandoned row."""
        ...

    async def purge(self, *, states: Collection[State], created_before: float | None = None) -> int:
        """Delete final rows in ``states`` (older than ``created_before``); returns how many."""
        ...

    async def prune(self, *, delivered_before: float) -> int:
        """Delete delivered rows last changed before ``delivered_before``."""
        ...
