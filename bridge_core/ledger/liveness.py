"""Whether a SQLite ledger's row owners run, as the claims' statements ask (``owner_alive``).

A SQLite ledger belongs to one host, so an owner (host, process id, start time) is alive when
that process runs here (``is_alive_here``). Asked once per row inside a statement, the answer
is remembered: a dead owner stays dead (its pid and start time never come back, so the memory
is kept, up to a bound); a live one only within one statement, in a set the caller clears
before each (``live``, or its own). ``dead_json`` is the dead set as the JSON list the
statements compare owners with before they call back into Python.

The store keeps one for its writer thread and its reader; the writer process (``sqlchild``)
keeps its own, since the statements that ask run there.
"""

from __future__ import annotations

import json

from bridge_core.ledger.model import Owner
from bridge_core.ledger.owner import is_alive_here

__all__ = ["Liveness"]

_DEAD_LIMIT = 10_000


class Liveness:
    """``alive(owner)`` for the rows of the store whose owner is ``owner``, on host ``me``."""

    def __init__(self, owner: str, *, me: Owner) -> None:
        self.owner = owner
        self.me = me
        self.live: set[str] = set()  # live owners seen in the current statement
        self.dead: set[str] = set()
        self.dead_json = "[]"  # ``dead``, rebuilt when an owner is found dead (rare)

    def alive(self, owner: str, live: set[str] | None = None) -> bool:
        """Whether ``owner`` runs; ``live``: the set of the statement asking (``self.live``
        when ``None``)."""
        live = self.live if live is None else live
        if owner == self.owner or owner in live:
            return True
        if owner in self.dead:
            return False
        if is_alive_here(owner, me=self.me):
            live.add(owner)
            return True
        if len(self.dead) > _DEAD_LIMIT:
            self.dead.clear()
        self.dead.add(owner)
        self.dead_json = json.dumps(sorted(self.dead))
        return False

    def forget_live(self) -> None:
        """Before a statement: the live owners seen by the last one may have ended since."""
        self.live.clear()
