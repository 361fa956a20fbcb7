"""The pure decision logic: a fold over one channel's log that every member computes alike.

``GroupView`` is fed the log's records in log order (``apply``) and answers, for the member it
was built for, which user turns that member must deliver now. It does no I/O and reads no clock:
every number it compares comes from the log (a turn's ``inserted_at``, a join's ``since``), so
members that fold the same records make the same decisions whenever they process them.

The rules (issue 5, after seed ADR-0069):

- Owner of a turn: among the members present at that point of the log whose ``since`` is at or
  before the turn's ``inserted_at``, the highest rendezvous score (``hashing``); when none is
  eligible yet, every present member counts.
- Pending turns: the view keeps, per conversation, the user turns no agent frame has answered,
  each with the owner it was assigned to. A frame answering turn ``s`` settles ``s`` and nothing
  else: a takeover can hand a member older turns after it answered a newer one, so "answered a
  later turn" does not mean "handled this one". Every handled turn needs its own frame (the
  runtime records one for every turn, a busy notice included); a turn handled without one stays
  pending and is delivered again if its owner leaves.
  At most ``max_conversations`` conversations are kept, the least recently active dropped first:
  the log stays the truth, this is a cache.
- Takeover: at a leave record the departed member's pending turns go, per conversation, to the
  owner computed at the leave's ``inserted_at`` among the remaining members; if that is this
  member, they are delivered now. A turn the departed member answered is no longer pending, so it
  is never delivered again.
- Orphans: a pending turn whose owner left while no member remained is assigned at the next join
  (``Join`` records are where a restarted gateway picks up the turns a crash left unanswered).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field

import xxhash

from bridge_core.conversation import Frame, Join, Leave, LogRecord, Turn
from bridge_core.ownership.hashing import member_seed

__all__ = ["DEFAULT_MAX_CONVERSATIONS", "GroupView", "ViewStatistics"]

DEFAULT_MAX_CONVERSATIONS = 10_000

_xxh3 = xxhash.xxh3_64_intdigest


@dataclass(slots=True)
class _Pending:
    """One conversation's unanswered turns, each with the member it is assigned to."""

    turns: list[tuple[Turn, str | None]] = field(default_factory=list)


@dataclass(slots=True)
class _ViewCounts:
    turns: int = 0
    owned: int = 0
    passed: int = 0
    taken_over: int = 0
    orphans_adopted: int = 0
    conversations_dropped: int = 0


@dataclass(frozen=True, slots=True)
class ViewStatistics:
    """``GroupView.statistics()``: the turns it folded and how ownership moved."""

    turns: int
    owned: int
    passed: int
    taken_over: int
    orphans_adopted: int
    conversations_dropped: int


class GroupView:
    """Membership and pending turns of one channel's group, seen by member ``me``.

    ``members`` is the membership (member id to ``since``) just before the first record that
    will be applied. ``me`` may be ``None`` for an observer that never delivers.
    """

    def __init__(
        self,
        *,
        me: str | None,
        members: Mapping[str, float] | None = None,
        max_conversations: int = DEFAULT_MAX_CONVERSATIONS,
    ) -> None:
        if max_conversations < 1:
            raise ValueError(f"max_conversations must be at least 1, got {max_conversations}")
        self.me = me
        self.max_conversations = max_conversations
        self._counts = _ViewCounts()
        self._since: dict[str, float] = {}
        self._order: tuple[tuple[str, float, int], ...] = ()
        self._pending: OrderedDict[str, _Pending] = OrderedDict()
        # departed-member lookups touch only that member's conversations
        self._by_owner: dict[str | None, set[str]] = {}
        self._joined = False
        self._left = False
        # while apply_routed folds a record: every turn it assigns, with its member
        self._routes: list[tuple[Turn, str]] | None = None
        for member, since in (members or {}).items():
            self._since[member] = since
            if member == me:
                self._joined = True
        self._reorder()

    # ------------------------------------------------------------------ membership

    def statistics(self) -> ViewStatistics:
        """Its counters, as one snapshot."""
        return ViewStatistics(**asdict(self._counts))

    @property
    def members(self) -> dict[str, float]:
        """Present members and their ``since``."""
        return dict(self._since)

    @property
    def joined(self) -> bool:
        """Whether ``me`` has joined (its join record was applied) and not left."""
        return self._joined and not self._left

    @property
    def left(self) -> bool:
        """Whether a leave record of ``me`` was applied (graceful or expired)."""
        return self._left

    def _reorder(self) -> None:
        self._order = tuple(
            (member, since, member_seed(member)) for member, since in sorted(self._since.items())
        )

    def owner(self, conversation: str, at: float) -> str | None:
        """The owner of a turn of ``conversation`` committed at ``at``, with this membership."""
        key = conversation.encode("utf-8")
        best: str | None = None
        best_score = -1
        any_best: str | None = None
        any_score = -1
        # _order is sorted by member id, so ">=" on a tie keeps the greater id
        for member, since, seed in self._order:
            value = _xxh3(key, seed)
            if since <= at:
                if value >= best_score:
                    best_score = value
                    best = member
            elif best is None and value >= any_score:
                any_score = value
                any_best = member
        # nobody eligible yet: every present member counts, and then every member went
        # through the second branch
        return best if best is not None else any_best

    # ------------------------------------------------------------------ pending turns

    def pending(self, conversation: str) -> list[tuple[Turn, str | None]]:
        """The unanswered turns of ``conversation`` with their assigned owner, oldest first."""
        entry = self._pending.get(conversation)
        return list(entry.turns) if entry else []

    def pending_conversations(self, owner: str | None) -> set[str]:
        """Conversations with an unanswered turn assigned to ``owner``."""
        return set(self._by_owner.get(owner, ()))

    @property
    def pending_count(self) -> int:
        return sum(len(entry.turns) for entry in self._pending.values())

    def _index(self, owner: str | None, conversation: str) -> None:
        # once per folded turn: no throwaway set() as setdefault's default
        bucket = self._by_owner.get(owner)
        if bucket is None:
            self._by_owner[owner] = {conversation}
        else:
            bucket.add(conversation)

    def _unindex(
        self, conversation: str, entry: _Pending | None, owners: Iterable[str | None]
    ) -> None:
        remaining = {owner for _turn, owner in entry.turns} if entry else set()
        for owner in set(owners):
            if owner not in remaining:
                bucket = self._by_owner.get(owner)
                if bucket is not None:
                    bucket.discard(conversation)
                    if not bucket:
                        del self._by_owner[owner]

    def _drop_oldest(self) -> None:
        while len(self._pending) > self.max_conversations:
            conversation, entry = self._pending.popitem(last=False)
            self._unindex(conversation, None, [owner for _turn, owner in entry.turns])
            self._counts.conversations_dropped += 1

    # ------------------------------------------------------------------ the fold

    def apply(self, record: LogRecord) -> list[Turn]:
        """Fold one record; return the turns ``me`` must deliver now, in log order."""
        if isinstance(record, Turn):
            return self._on_turn(record)
        if isinstance(record, Frame):
            self._on_frame(record)
            return []
        if isinstance(record, Join):
            return self._on_join(record)
        if isinstance(record, Leave):
            return self._on_leave(record)
        raise TypeError(f"GroupView.apply: not a log record: {record!r}")

    def apply_routed(self, record: LogRecord) -> list[tuple[Turn, str]]:
        """Fold one record for the whole group: each turn it assigns to a member now (a new
        turn; a turn moved at a join or a leave) with that member, in log order. What ``apply``
        returns for member ``m`` is exactly the turns routed to ``m`` here, so one fold can
        serve every member of a process (``fold_share``)."""
        routes: list[tuple[Turn, str]] = []
        self._routes = routes
        try:
            self.apply(record)
        finally:
            self._routes = None
        return routes

    def present(self, member: str) -> bool:
        """Whether ``member`` is in the membership (joined, not left)."""
        return member in self._since

    def apply_all(self, records: Iterable[LogRecord]) -> list[Turn]:
        out: list[Turn] = []
        for record in records:
            out.extend(self.apply(record))
        return out

    def _on_turn(self, turn: Turn) -> list[Turn]:
        owner = self.owner(turn.conversation, turn.inserted_at)
        entry = self._pending.get(turn.conversation)
        if entry is None:
            entry = self._pending[turn.conversation] = _Pending()
        else:
            self._pending.move_to_end(turn.conversation)
        entry.turns.append((turn, owner))
        self._index(owner, turn.conversation)
        self._drop_oldest()
        self._counts.turns += 1
        if self._routes is not None and owner is not None:
            self._routes.append((turn, owner))
        if owner is not None and owner == self.me and not self._left:
            self._counts.owned += 1
            return [turn]
        self._counts.passed += 1
        return []

    def _on_frame(self, frame: Frame) -> None:
        entry = self._pending.get(frame.conversation)
        if entry is None:
            return
        kept: list[tuple[Turn, str | None]] = []
        settled: list[str | None] = []
        for turn, owner in entry.turns:
            if turn.seq == frame.answers_seq:
                settled.append(owner)
            else:
                kept.append((turn, owner))
        if not settled:
            return
        entry.turns = kept
        if not kept:
            del self._pending[frame.conversation]
            self._unindex(frame.conversation, None, settled)
        else:
            self._unindex(frame.conversation, entry, settled)

    def _on_join(self, join: Join) -> list[Turn]:
        self._since[join.member] = join.since
        self._reorder()
        if join.member == self.me:
            self._joined = True
        orphans = set(self._by_owner.get(None, ()))
        for owner in list(self._by_owner):
            if owner is not None and owner not in self._since:
                orphans |= self._by_owner[owner]
        out = self._reassign(orphans, gone=None, at=join.inserted_at, adopt=True)
        return out

    def _on_leave(self, leave: Leave) -> list[Turn]:
        self._since.pop(leave.member, None)
        self._reorder()
        if leave.member == self.me:
            self._left = True
        conversations = set(self._by_owner.get(leave.member, ()))
        return self._reassign(conversations, gone=leave.member, at=leave.inserted_at, adopt=False)

    def _reassign(
        self, conversations: set[str], *, gone: str | None, at: float, adopt: bool
    ) -> list[Turn]:
        """Give the pending turns of absent owners in ``conversations`` to their new owner.

        With ``gone`` set (a leave), only that member's turns move; without it (a join), every
        turn whose owner is absent (orphans) does.
        """
        out: list[Turn] = []
        present = self._since
        mine_allowed = self.me is not None and not self._left
        emptied: set[str | None] = set()
        routes = self._routes
        routed: list[tuple[Turn, str]] = []
        for conversation in conversations:
            entry = self._pending.get(conversation)
            if entry is None:
                continue
            new_owner = self.owner(conversation, at)
            mine = mine_allowed and new_owner == self.me
            moved: set[str | None] = set()
            turns = entry.turns
            for index, (turn, owner) in enumerate(turns):
                if owner == gone if gone is not None else owner is None or owner not in present:
                    moved.add(owner)
                    turns[index] = (turn, new_owner)
                    if mine:
                        out.append(turn)
                    if routes is not None and new_owner is not None:
                        routed.append((turn, new_owner))
            if not moved:
                continue
            # every turn of the absent owners moved, so they no longer hold this conversation
            for owner in moved:
                bucket = self._by_owner.get(owner)
                if bucket is not None:
                    bucket.discard(conversation)
                    if not bucket:
                        emptied.add(owner)
            self._index(new_owner, conversation)
            if mine:
                if adopt:
                    self._counts.orphans_adopted += 1
                else:
                    self._counts.taken_over += 1
        for owner in emptied:
            if not self._by_owner.get(owner, True):
                del self._by_owner[owner]
        out.sort(key=lambda turn: turn.seq)
        if routed and routes is not None:
            routed.sort(key=lambda route: route[0].seq)
            routes.extend(routed)
        return out
