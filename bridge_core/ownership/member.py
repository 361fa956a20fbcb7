"""A member of an agent group: joins a channel's log, follows it, delivers the turns it owns.

``AgentGroupMember.run()`` joins (``since = join time + settle``), rebuilds the pending turns of
the last ``lookback`` seconds from the log (so turns a crashed gateway admitted but never
answered are answered), then follows the log with its own cursor, folding every record into a
``GroupView`` and calling ``on_turn(turn, history)`` for each turn the view says it must
deliver: turns it owns, turns it takes over at a leave, orphans it adopts at a join.
Members of one log handle that offers ``fold_shares`` (the SQLite log) fold the log once for
all of them (``fold_share``, ADR 0146); each still delivers only the turns assigned to it.

One conversation's turns are handed to ``on_turn`` one at a time, in log order (turns taken
over are slotted in by seq among the ones still queued); different conversations run
concurrently up to ``max_concurrent``. The handler records an answer for every turn with
``log.record_frame`` (or ``member.record_frame``) before sending it: a turn without a frame is
unanswered, and is delivered again if this member leaves. It may raise ``AgentBusy``:
``on_busy(turn, error)``
is then called so the runtime sends a short busy notice (never silence).

The member heartbeats every ``heartbeat`` seconds and runs the reaper; a member whose heartbeat
has not succeeded for ``0.8 * expiry`` stops delivering (the others may be about to take its
turns over). A member that finds itself expired joins again under a new id, with a new settle
delay. On ``stop()`` (or cancellation) it stops starting turns, lets in-flight ones finish for
up to ``drain_timeout``, and appends a graceful leave, so its unanswered turns move at once.
"""

from __future__ import annotations

import logging
import secrets
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass

import anyio
from anyio.abc import TaskGroup

from bridge_core.conversation import Frame, Turn
from bridge_core.ownership.fold_share import FoldShare, FoldShares, SharedMemberView
from bridge_core.ownership.log import (
    AgentBusy,
    ConversationLog,
    JoinResult,
    LogUnavailable,
    NotAMember,
    OwnershipError,
)
from bridge_core.ownership.loop_native import LoopEvent, loop_native
from bridge_core.ownership.recent import RecentHistory
from bridge_core.ownership.view import DEFAULT_MAX_CONVERSATIONS, GroupView

__all__ = ["AgentGroupMember", "BusyHandler", "MemberStatistics", "TurnHandler"]

logger = logging.getLogger("bridge_core.ownership")

TurnHandler = Callable[[Turn, Sequence[Turn | Frame]], Awaitable[None]]
"""``on_turn(turn, history)``: answer ``turn``; ``history`` is the conversation's recent turns
and frames up to and including it."""

BusyHandler = Callable[[Turn, AgentBusy], Awaitable[None]]
"""``on_busy(turn, error)``: tell the end user the agent is busy (the runtime sends it)."""


def _seq(turn: Turn) -> int:
    return turn.seq


@dataclass(slots=True)
class _MemberCounts:
    delivered: int = 0
    busy: int = 0
    handler_errors: int = 0
    rejoins: int = 0
    log_errors: int = 0


@dataclass(frozen=True, slots=True)
class MemberStatistics:
    """``AgentGroupMember.statistics()``: turns it handed over, and what went wrong."""

    delivered: int
    busy: int
    handler_errors: int
    rejoins: int
    log_errors: int


class AgentGroupMember:
    """One member of a channel's agent group. See the module docstring for the behaviour."""

    def __init__(
        self,
        log: ConversationLog,
        *,
        member_id: str,
        on_turn: TurnHandler,
        on_busy: BusyHandler | None = None,
        settle: float = 1.0,
        heartbeat: float = 1.0,
        expiry: float | None = None,
        lookback: float = 3600.0,
        history_limit: int = 20,
        max_conversations: int = DEFAULT_MAX_CONVERSATIONS,
        max_concurrent: int = 64,
        drain_timeout: float = 10.0,
        follow_wait: float = 1.0,
        exact_id: bool = False,
    ) -> None:
        if settle < 0 or heartbeat <= 0:
            raise ValueError(
                f"AgentGroupMember({member_id!r}): settle must be >= 0 and heartbeat > 0, "
                f"got settle={settle}, heartbeat={heartbeat}"
            )
        self.expiry = 3.0 * heartbeat if expiry is None else expiry
        if self.expiry <= heartbeat:
            raise ValueError(
                f"AgentGroupMember({member_id!r}): expiry ({self.expiry} s) must exceed the "
                f"heartbeat interval ({heartbeat} s), or live members get expired"
            )
        self.log = log
        self.member_id = member_id
        self.on_turn = on_turn
        self.on_busy = on_busy
        self.settle = settle
        self.heartbeat_interval = heartbeat
        self.lookback = lookback
        self.history_limit = history_limit
        self.max_conversations = max_conversations
        self.drain_timeout = drain_timeout
        self.follow_wait = follow_wait
        self.exact_id = exact_id
        self._counts = _MemberCounts()
        self.view: GroupView | SharedMemberView | None = None
        self.current_id: str | None = None
        self.ready = anyio.Event()
        if max_concurrent < 1:
            raise ValueError(
                f"AgentGroupMember({member_id!r}): max_concurrent must be at least 1, "
                f"got {max_concurrent}"
            )
        self.max_concurrent = max_concurrent
        self._stop = anyio.Event()
        self._done = anyio.Event()
        # what _stop and _done say, read as plain attributes on every turn (ADR 0178)
        self._stopping = False
        self._finished = False
        # a conversation is in _queues while a worker holds it or it waits in _ready (once)
        self._queues: dict[str, deque[Turn]] = {}
        self._ready: deque[str] = deque()
        self._sleepers: deque[LoopEvent] = deque()  # idle workers, oldest first
        # the loop's own one-shot wake (ADR 0178) and clock, taken when run() starts (ADR 0137)
        self._new_wake: Callable[[], LoopEvent] = anyio.Event
        self._clock: Callable[[], float] = anyio.current_time
        self._workers = 0
        self._recent = RecentHistory(
            history_limit=history_limit, max_conversations=max_conversations
        )
        # a shared fold's turns for this member that came before its task group (ADR 0146)
        self._tg: TaskGroup | None = None
        self._early: list[Turn] = []
        self._in_flight = 0
        self._idle: anyio.Event | None = None  # made only while stopping waits for it
        self._last_beat = 0.0
        self._expelled = False
        self._abandoned = False

    # ------------------------------------------------------------------ public

    def statistics(self) -> MemberStatistics:
        """Its counters, as one snapshot."""
        return MemberStatistics(**asdict(self._counts))

    def stop(self) -> None:
        """Ask ``run()`` to finish in-flight turns, leave gracefully and return."""
        self._stopping = True
        self._stop.set()
        self._finish()

    def _finish(self) -> None:
        """This incarnation stops following and starting turns."""
        self._finished = True
        self._done.set()

    def abandon(self) -> None:
        """Stop like ``stop()`` but append no leave: heartbeats stop and the reaper expires this
        member after ``expiry``, as it would a crashed process's (a dropped agent connection)."""
        self._abandoned = True
        self.stop()

    async def record_frame(self, turn: Turn, obligation: str) -> Frame:
        """Record this member's answer to ``turn`` in the log (before sending it)."""
        if self.current_id is None:
            raise NotAMember(f"member {self.member_id!r} has not joined yet")
        return await self.log.record_frame(turn, self.current_id, obligation)

    @property
    def delivering(self) -> bool:
        """Whether the member may start a turn now (joined, heartbeat fresh, not stopping)."""
        view = self.view
        return (
            view is not None
            and view.joined
            and not self._stopping
            and self._clock() - self._last_beat < 0.8 * self.expiry
        )

    def still_owns(self, turn: Turn) -> bool:
        """Whether ``turn``, taken from this member's queue, is still this member's to start: a
        handler that waits before it starts the turn (a connection's free slot) asks again, as
        the turn moves to another member when this one is expelled meanwhile."""
        view, me = self.view, self.current_id
        if self._expelled or view is None or me is None or not view.joined:
            return False
        for pending, owner in view.pending(turn.conversation):
            if pending.seq == turn.seq:
                return owner == me
        # Not among the view's pending turns: its conversation was dropped (the view keeps
        # ``max_conversations``) while the turn waited in our queue. Every member folds the same
        # log and dropped it too, so nobody else will answer it: it is still ours. (A turn moves
        # away only when its owner leaves, and our queues are emptied when we join again.)
        return True

    async def run(self) -> None:
        """Serve until ``stop()`` or cancellation; rejoin under a new id after an expiry."""
        native = loop_native()
        self._new_wake, self._clock = native.wake, native.clock
        incarnation = failures = 0
        while not self._stopping:
            if self.exact_id:
                member = self.member_id if incarnation == 0 else f"{self.member_id}~{incarnation}"
            else:
                member = f"{self.member_id}:{secrets.token_hex(4)}"
            try:
                expelled = await self._serve(member)
            except LogUnavailable as error:
                # the log is down: nothing can be delivered safely; try again as a new member
                self._counts.log_errors += 1
                delay = min(30.0, self.heartbeat_interval * 2 ** min(failures, 8))
                failures += 1
                logger.warning(
                    "agent group member %s of channel %s lost the log (%s); joining again in "
                    "%.1f s",
                    member,
                    self.log.channel,
                    error,
                    delay,
                )
                await anyio.sleep(delay)
                incarnation += 1
                continue
            failures = 0
            if not expelled:
                return
            incarnation += 1
            self._counts.rejoins += 1
            logger.warning(
                "agent group member %s of channel %s was expired (no heartbeat for %.1f s); "
                "joining again as a new member",
                member,
                self.log.channel,
                self.expiry,
            )

    # ------------------------------------------------------------------ one incarnation

    def _fold_share(self) -> FoldShare | None:
        """The fold this member shares with the other members of its log handle, if the
        handle offers one (ADR 0146); an exact id can be an earlier incarnation's, so a member
        with one folds alone."""
        shares = getattr(self.log, "fold_shares", None)
        if self.exact_id or not isinstance(shares, FoldShares):
            return None
        return shares.get(
            lookback=self.lookback,
            history_limit=self.history_limit,
            max_conversations=self.max_conversations,
        )

    def _routed(self, turns: list[Turn]) -> None:
        """The shared fold assigned ``turns`` to this member."""
        if self._finished:
            return  # stopped following, as a member folding alone stops: they move at its leave
        if self._tg is None:
            self._early.extend(turns)
        else:
            self._enqueue(self._tg, turns)

    async def _serve(self, member: str) -> bool:
        self._done = anyio.Event()
        self._finished = False
        self._expelled = False
        self._queues.clear()
        self._ready.clear()
        self._sleepers.clear()
        self._workers = 0  # the last incarnation's workers ended with its task group
        self._tg, self._early = None, []
        share = self._fold_share()
        if share is None:
            self._recent = RecentHistory(
                history_limit=self.history_limit, max_conversations=self.max_conversations
            )
            return await self._serve_as(member, None)
        self._recent = share.recent
        # listed before the join is appended: no turn of ours can be folded before
        share.register(member, self._routed)
        try:
            return await self._serve_as(member, share)
        finally:
            share.unregister(member)
            self._tg = None

    async def _serve_as(self, member: str, share: FoldShare | None) -> bool:
        joined = await self.log.join(member, settle=self.settle)
        self.current_id = member
        self._last_beat = self._clock()
        join = joined.join
        failure: LogUnavailable | None = None
        try:
            async with anyio.create_task_group() as tg:
                # heartbeat from the start: a long catch-up must not get us expired
                tg.start_soon(self._heartbeat_loop, member)
                view: GroupView | None
                try:
                    if share is None:
                        view = await self._catch_up(member, joined)
                    else:
                        view = await share.start(self.log, joined)
                except LogUnavailable as error:
                    failure = error
                    tg.cancel_scope.cancel()
                    view = None
                if view is not None:
                    if share is None:
                        self.view = view
                        self._enqueue(tg, view.apply(join))
                        tg.start_soon(self._follow_loop, tg, view, join.seq)
                    else:
                        self.view = SharedMemberView(share, view, member)
                        self._tg = tg
                        early, self._early = self._early, []
                        self._enqueue(tg, early)
                        tg.start_soon(self._follow_share, share, member)
                    self.ready.set()
                    await self._done.wait()
                    # stop starting turns; let in-flight ones finish, then stop heartbeating
                    with anyio.move_on_after(self.drain_timeout):
                        while self._in_flight:
                            self._idle = anyio.Event()
                            await self._idle.wait()
                    tg.cancel_scope.cancel()
            if failure is not None:
                raise failure
        finally:
            if not self._expelled and not self._abandoned:
                with anyio.CancelScope(shield=True), anyio.move_on_after(5.0):
                    try:
                        await self.log.leave(member)
                    except Exception:
                        logger.exception("agent group member %s could not append its leave", member)
        return self._expelled

    async def _catch_up(self, member: str, joined: JoinResult) -> GroupView:
        """The view just before our join: the last ``lookback`` seconds folded."""
        join = joined.join
        backlog = await self.log.read_back(
            before_seq=join.seq,
            members=joined.members_before,
            not_before=join.inserted_at - self.lookback,
        )
        view = GroupView(
            me=member, members=backlog.members_at_start, max_conversations=self.max_conversations
        )
        # records before our join can never be ours; they rebuild the pending turns
        view.apply_all(backlog.records)
        self._recent.remember(backlog.records)
        return view

    def _enqueue(self, tg: TaskGroup, turns: list[Turn]) -> None:
        queues = self._queues
        for turn in turns:
            queue = queues.get(turn.conversation)
            if queue is None:
                queues[turn.conversation] = deque((turn,))
                self._ready.append(turn.conversation)
                self._wake_worker(tg)
            elif not queue or turn.seq > queue[-1].seq:
                queue.append(turn)
            else:
                # a takeover hands over older turns: keep the conversation in log order
                queue.append(turn)
                ordered = sorted(queue, key=_seq)
                queue.clear()
                queue.extend(ordered)

    def _wake_worker(self, tg: TaskGroup) -> None:
        """A conversation became ready: wake an idle worker, or start one below the limit.

        At the limit every worker is busy, and each looks at ``_ready`` again after its turn.
        """
        if self._sleepers:
            self._sleepers.popleft().set()
        elif self._workers < self.max_concurrent:
            self._workers += 1
            tg.start_soon(self._worker)

    async def _worker(self) -> None:
        """Deliver turns of ready conversations, one turn at a time, until the member stops.

        At most ``max_concurrent`` workers exist, so that many turns are in flight at most. A
        worker holds one conversation while it delivers that conversation's turn (so each
        conversation has one turn in flight, in log order), then puts it back at the end of
        ``_ready`` if more are queued: conversations take turns, as they did waiting in line
        for a limiter.
        """
        ready, queues, new_wake = self._ready, self._queues, self._new_wake
        while not self._finished:
            if not ready:
                wake = new_wake()
                self._sleepers.append(wake)
                await wake.wait()
                continue
            conversation = ready.popleft()
            queue = queues[conversation]
            while not self.delivering:
                # _done, not _finished: mypy keeps _finished narrowed to False from the
                # outer loop's test, across the awaits that may set it
                if self._done.is_set():
                    return
                await anyio.sleep(self.heartbeat_interval / 4)
            turn = queue.popleft()
            self._in_flight += 1
            try:
                await self._deliver(turn)
            finally:
                self._in_flight -= 1
                if not self._in_flight and self._idle is not None:
                    self._idle.set()
                if queue:
                    ready.append(conversation)
                elif queues.get(conversation) is queue:
                    del queues[conversation]

    async def _deliver(self, turn: Turn) -> None:
        self._counts.delivered += 1
        try:
            history = await self._history(turn)
            await self.on_turn(turn, history)
        except AgentBusy as busy:
            self._counts.busy += 1
            if self.on_busy is None:
                logger.error(
                    "agent busy on turn %s of %s and no on_busy handler is set: the user "
                    "gets no answer; pass on_busy= to AgentGroupMember",
                    turn.seq,
                    turn.conversation,
                )
                return
            try:
                await self.on_busy(turn, busy)
            except Exception:
                self._counts.handler_errors += 1
                logger.exception("on_busy failed for turn %s of %s", turn.seq, turn.conversation)
        except Exception:
            self._counts.handler_errors += 1
            logger.exception(
                "on_turn failed for turn %s of conversation %s", turn.seq, turn.conversation
            )

    async def _history(self, turn: Turn) -> Sequence[Turn | Frame]:
        kept = self._recent.get(turn.conversation)
        if kept and kept[0].seq <= turn.seq:
            # the member folded every record since before this turn: no round trip
            if kept[-1].seq <= turn.seq:
                return list(kept)  # nothing newer folded yet: the usual case, copied in C
            return [record for record in kept if record.seq <= turn.seq]
        # history is context for the agent, never a reason to drop the turn: after a few
        # failed reads the agent gets the turn alone
        for attempt in range(3):
            try:
                return await self.log.recent_history(
                    turn.conversation, self.history_limit, up_to_seq=turn.seq
                )
            except OwnershipError as error:
                self._counts.log_errors += 1
                logger.warning("reading the history of %s failed: %r", turn.conversation, error)
                await anyio.sleep(0.05 * 2**attempt)
        return [turn]

    async def _heartbeat_loop(self, member: str) -> None:
        while True:
            started = self._clock()
            try:
                if await self.log.heartbeat(member):
                    self._last_beat = started
                else:
                    # our expiry is in the log; the follow loop will see it too
                    self._expelled = True
                    self._finish()
                    return
                await self.log.reap(expiry=self.expiry)
            except Exception as error:
                self._counts.log_errors += 1
                logger.warning("agent group member %s: heartbeat failed: %r", member, error)
            await anyio.sleep(self.heartbeat_interval)

    async def _follow_loop(self, tg: TaskGroup, view: GroupView, cursor: int) -> None:
        backoff = 0.05
        while not self._finished:
            try:
                records = await self.log.read(after_seq=cursor, wait=self.follow_wait)
            except Exception as error:
                self._counts.log_errors += 1
                logger.warning("agent group member %s: reading the log failed: %r", view.me, error)
                await anyio.sleep(backoff)
                backoff = min(backoff * 2, self.heartbeat_interval)
                continue
            backoff = 0.05
            self._recent.remember(records)
            for record in records:
                cursor = record.seq
                self._enqueue(tg, view.apply(record))
            if view.left:
                self._expelled = not self._stopping
                self._finish()
                return

    async def _follow_share(self, share: FoldShare, member: str) -> None:
        """Follow the log for the shared fold: one member of the share at a time reads and
        folds for all of them; the others wait for it to stop, or for their own leave."""
        try:
            await self._follow_share_reading(share, member)
        finally:
            share.stop_reading(member)

    async def _follow_share_reading(self, share: FoldShare, member: str) -> None:
        backoff = 0.05
        while not self._finished:
            if share.has_left(member):
                self._expelled = not self._stopping
                self._finish()
                return
            if not share.claim_reading(member):
                await share.wait_for_change()
                continue
            try:
                records = await self.log.read(after_seq=share.cursor, wait=self.follow_wait)
            except Exception as error:
                self._counts.log_errors += 1
                logger.warning("agent group member %s: reading the log failed: %r", member, error)
                await anyio.sleep(backoff)
                backoff = min(backoff * 2, self.heartbeat_interval)
                continue
            backoff = 0.05
            share.advance(records)
