"""One fold of a channel's log for the members of one log handle in one process (ADR 0146).

Every member of a group folds every record of the channel (``GroupView``), and the fold is pure:
members that fold the same records from the same state make the same decisions. Members of one
handle in one process (agent connections to one gateway, or a gateway's own members) therefore
need not each fold: a ``FoldShare`` folds each record once, for the whole group
(``GroupView.apply_routed``), and hands each turn to the member it is assigned to, if that member
is one of its own. What each member delivers is its own: its queues, its workers, its
heartbeats, when it stops. Only the view of the log and the recent history are shared.

The share's view starts from the catch-up of the first member that joins through it (the
``lookback`` before that member's join, as ``AgentGroupMember`` catches up alone) and follows
every record after it in log order. One member's follow loop at a time reads the log for the
share; the others wait until it stops (then one of them takes over from the share's cursor)
or until their own leave is folded (ADR 0178). A member
registers before it appends its join, so no turn assigned to it can be routed before it is
listed; member ids are unique per join, so a turn is only ever routed to the incarnation that
joined. When the last member of the share leaves, the view is dropped: the next member catches
up from the log again, as if it were the first.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import anyio

from bridge_core.conversation import Leave, LogRecord, Turn
from bridge_core.ownership.recent import RecentHistory
from bridge_core.ownership.view import GroupView, ViewStatistics

if TYPE_CHECKING:
    from bridge_core.ownership.log import ConversationLog, JoinResult

__all__ = ["FoldShare", "FoldShares", "ShareKey", "SharedMemberView"]

ShareKey = tuple[float, int, int]  # lookback, history_limit, max_conversations


class _Registered:
    """What the share keeps of one member: where its turns go and whether its leave was seen."""

    __slots__ = ("deliver", "left")

    def __init__(self, deliver: Callable[[list[Turn]], None]) -> None:
        self.deliver = deliver
        self.left = False


class FoldShare:
    """The fold of one channel's log shared by the members of one handle with equal options."""

    def __init__(self, *, lookback: float, history_limit: int, max_conversations: int) -> None:
        self.lookback = lookback
        self.history_limit = history_limit
        self.max_conversations = max_conversations
        self.view: GroupView | None = None
        self.cursor = 0  # the seq of the last record folded
        self.recent = RecentHistory(
            history_limit=history_limit, max_conversations=max_conversations
        )
        self._members: dict[str, _Registered] = {}
        self._starting: anyio.Event | None = None
        # the one member whose follow loop reads the log for the share (ADR 0178), and what
        # the others wait on: set when it stops reading, or when a member's leave is folded
        self._reader: str | None = None
        self._changed = anyio.Event()

    def register(self, member: str, deliver: Callable[[list[Turn]], None]) -> None:
        """List ``member`` (before its join is appended): turns assigned to it go to
        ``deliver`` from then on, in log order per conversation."""
        self._members[member] = _Registered(deliver)

    def unregister(self, member: str) -> None:
        """``member`` stopped following; with nobody left, the view is dropped."""
        self.stop_reading(member)
        self._members.pop(member, None)
        if not self._members and self._starting is None:
            self.view = None
            self.cursor = 0
            self.recent.clear()

    def claim_reading(self, member: str) -> bool:
        """Make ``member``'s follow loop the one that reads the log for the share if none is;
        whether it is that one. The others' would read what it reads, and only wake the loop
        for nothing after each commit."""
        if self._reader is None:
            self._reader = member
        return self._reader == member

    def stop_reading(self, member: str) -> None:
        """``member``'s follow loop stops reading (it ends): another member's takes over."""
        if self._reader == member:
            self._reader = None
            self._notify()

    async def wait_for_change(self) -> None:
        """Until the reader stops reading, or a member's leave is folded."""
        await self._changed.wait()

    def _notify(self) -> None:
        changed, self._changed = self._changed, anyio.Event()
        changed.set()

    def has_left(self, member: str) -> bool:
        """Whether the share folded a leave of ``member`` (graceful or expired)."""
        registered = self._members.get(member)
        return registered is not None and registered.left

    async def start(self, log: ConversationLog, joined: JoinResult) -> GroupView:
        """Make sure the view exists; the first member builds it, up to its own join.

        The first member catches the view up from the log (what it would have done alone) and
        folds its join; a member that finds the view there, or being built, uses it: the view
        folds every record in log order, this member's join included.
        """
        while self.view is None:
            if self._starting is not None:
                await self._starting.wait()
                continue
            starting = self._starting = anyio.Event()
            try:
                join = joined.join
                backlog = await log.read_back(
                    before_seq=join.seq,
                    members=joined.members_before,
                    not_before=join.inserted_at - self.lookback,
                )
                view = GroupView(
                    me=None,
                    members=backlog.members_at_start,
                    max_conversations=self.max_conversations,
                )
                # a member listed here whose join is in the backlog was in the group then;
                # the backlog is every record before the join: the join comes next
                self._fold(view, [*backlog.records, join])
                self.view = view
            finally:
                self._starting = None
                starting.set()
        # a member that found the view there: its join is folded when a follow loop reaches it
        return self.view

    def advance(self, records: Sequence[LogRecord]) -> None:
        """Fold the records after the cursor (records a member read that another member's
        follow loop already folded are skipped), handing each routed turn to its member."""
        view = self.view
        if view is None or not records or records[-1].seq <= self.cursor:
            return
        cursor = self.cursor
        if records[0].seq <= cursor:
            records = [record for record in records if record.seq > cursor]
        self._fold(view, records)

    def _fold(self, view: GroupView, records: Sequence[LogRecord]) -> None:
        members = self._members
        self.recent.remember(records)
        # each member's turns of these records, in log order, handed over once they are folded
        routed: dict[str, list[Turn]] = {}
        for record in records:
            self.cursor = record.seq
            for turn, owner in view.apply_routed(record):
                turns = routed.get(owner)
                if turns is None:
                    routed[owner] = [turn]
                else:
                    turns.append(turn)
            if isinstance(record, Leave):
                registered = members.get(record.member)
                if registered is not None:
                    registered.left = True
                    self._notify()  # its follow loop may be waiting for the reader
        for owner, turns in routed.items():
            registered = members.get(owner)
            if registered is not None:
                registered.deliver(turns)


class SharedMemberView:
    """``member.view`` for a member of a share: the shared view, seen by ``me`` (the view
    stays readable after the share dropped it, as a member's own view after it stopped)."""

    def __init__(self, share: FoldShare, view: GroupView, me: str) -> None:
        self._share = share
        self._shared = view
        self.me = me

    @property
    def members(self) -> dict[str, float]:
        return self._shared.members

    @property
    def joined(self) -> bool:
        """Whether ``me``'s join was folded and no leave of it was."""
        return self._shared.present(self.me) and not self._share.has_left(self.me)

    @property
    def left(self) -> bool:
        return self._share.has_left(self.me)

    def owner(self, conversation: str, at: float) -> str | None:
        return self._shared.owner(conversation, at)

    def pending(self, conversation: str) -> list[tuple[Turn, str | None]]:
        return self._shared.pending(conversation)

    def pending_conversations(self, owner: str | None) -> set[str]:
        return self._shared.pending_conversations(owner)

    @property
    def pending_count(self) -> int:
        return self._shared.pending_count

    def statistics(self) -> ViewStatistics:
        """The shared fold's counters (turns folded for the whole group)."""
        return self._shared.statistics()


class FoldShares:
    """A log handle's shares, one per set of member options that shape the fold."""

    def __init__(self) -> None:
        self._shares: dict[ShareKey, FoldShare] = {}

    def get(self, *, lookback: float, history_limit: int, max_conversations: int) -> FoldShare:
        key = (lookback, history_limit, max_conversations)
        share = self._shares.get(key)
        if share is None:
            share = self._shares[key] = FoldShare(
                lookback=lookback, history_limit=history_limit, max_conversations=max_conversations
            )
        return share
