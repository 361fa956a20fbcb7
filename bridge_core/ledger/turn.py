"""The claim a delivery's ``begin()`` makes when the reply's turn comes (ADR 0025)."""

from __future__ import annotations

from collections.abc import Callable

from bridge_core.ledger.model import ClaimLost, Obligation
from bridge_core.ledger.store import LedgerStore

__all__ = ["ClaimOnBegin"]


class ClaimOnBegin:
    """The claim of ``row`` that a delivery's ``begin()`` makes, once, when its turn comes."""

    __slots__ = ("_clock", "_store", "claimed", "row")

    def __init__(self, store: LedgerStore, clock: Callable[[], float], row: Obligation) -> None:
        self._store = store
        self._clock = clock
        self.row = row
        self.claimed: Obligation | None = None

    async def begin(self) -> None:
        if self.claimed is not None:
            return
        claimed = await self._store.claim(self.row.id, fence=self.row.fence, now=self._clock())
        if claimed is None:
            raise ClaimLost(
                f"reply {self.row.id!r} was claimed elsewhere (or changed) before its turn came"
            )
        self.claimed = claimed

    @property
    def held(self) -> Obligation:
        assert self.claimed is not None, "begin() has not claimed the row"
        return self.claimed
