"""The notifier (seed ADR 0007): one live message per agent, burst summaries, paced by a sender.

``handle(event)`` is synchronous and cheap: it updates the agent's latest state and, only when
the agent has no work at the sender, submits one supersedable piece of work whose text is
rendered when the sender sends it. So any number of changes before the next edit slot give one
edit, and pending work is bounded by live agents, never by events. ``run()`` fires the hold
timers (a first post waits ``hold`` so a lone agent can be told from a burst) and forgets
finished agents after ``forget_after``.

Rules, in the order the seed gives them:

- ``AgentSpawned`` opens a live message after the hold; ``StatusChanged`` edits it;
  ``AgentFinished`` (outcome, cost, turns) and ``AgentGone`` finalise it. Other kinds and
  workspaces outside the filters are ignored.
- ``threshold`` or more spawns of one workspace within the hold share a summary (counts of done,
  running, failed) edited in place; a spawn within ``window`` of its latest member joins it;
  failed and crashed members still get their own post, killed ones stay counted.
- ``NotFound`` drops the message ref: the next update posts exactly one new message (a terminal
  state posts at once, since nothing terminal is lost).
- ``MessageRejected`` drops that rendering only: it is logged (channel, agent, reason), the
  message keeps its ref (a refused post leaves none), and the next update renders again. The
  refused version is never resent, so a rendering the platform always refuses costs one attempt
  per update, paced by the sender; a refused terminal state ends the agent's message there.
- Terminal work goes at the top priority, new messages next, intermediate edits last, so after
  a pause or an outage the terminal states go first, then each running agent's current state.
- Without edit support: one post at spawn (or a place in a summary) and one terminal post.
- Message refs live only in memory: after a restart a running agent gets a fresh message.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import anyio

from bridge_core.events import (
    AgentFinished,
    AgentGone,
    AgentSpawned,
    FleetEvent,
    Outcome,
    StatusChanged,
)
from bridge_core.notify.config import NotifyConfig
from bridge_core.notify.protocol import NEW, TERMINAL, UPDATE, SenderLike
from bridge_core.notify.render import (
    AgentState,
    Cleaner,
    SummaryCounts,
    render_agent,
    render_summary,
)
from bridge_core.provider import (
    Capabilities,
    MessageRef,
    MessageRejected,
    NotFound,
    ProviderError,
    TransportError,
)

__all__ = ["Notifier", "NotifierStats"]

logger = logging.getLogger("bridge_core.notify")

_HOLDING = 0  # waiting out the hold
_LIVE = 1  # has (or is getting) its own message
_SUMMARY = 2  # counted in a summary, no message of its own


@dataclass(slots=True)
class NotifierStats:
    events: int = 0
    filtered: int = 0
    summaries: int = 0
    terminal_delivered: int = 0
    dropped_refs: int = 0
    rejected: int = 0


@dataclass(eq=False, slots=True)
class _Slot:
    """One message the notifier keeps current: an agent's, or a summary's."""

    key: tuple[int, str, int]
    ref: MessageRef | None = None
    version: int = 0
    rendered: int = -1
    delivered: int = -1
    refused: int = -1  # the latest version the platform refused (MessageRejected): not resent
    outstanding: int = 0
    priority: int = UPDATE
    lost: bool = False  # its message was deleted; the next update posts a new one
    post_text: Callable[[], str | None] = field(default=lambda: None)
    edit_text: Callable[[], str | None] = field(default=lambda: None)
    outcome: Callable[[MessageRef | ProviderError | None], None] = field(default=lambda r: None)

    @property
    def owes(self) -> bool:
        """Whether its latest version has been neither delivered nor refused by the platform."""
        return self.delivered < self.version and self.refused < self.version


@dataclass(eq=False, slots=True)
class _Agent:
    name: str
    workspace: str
    slot: _Slot
    phase: int = _HOLDING
    title: str = ""
    status: str = ""
    finished: AgentFinished | None = None
    gone: str | None = None
    terminal_at: float = 0.0
    spawned_at: float = 0.0
    summary: _Summary | None = None

    @property
    def terminal(self) -> bool:
        return self.finished is not None or self.gone is not None


@dataclass(eq=False, slots=True)
class _Summary:
    workspace: str
    slot: _Slot
    latest: float
    names: list[str] = field(default_factory=list)
    size: int = 0
    running: int = 0
    done: int = 0
    failed: int = 0
    killed: int = 0
    gone: int = 0
    awaiting: list[tuple[str, float, int]] = field(default_factory=list)


class Notifier:
    """Turns one channel's fleet events into live messages submitted to that channel's sender."""

    def __init__(
        self,
        channel: str,
        sender: SenderLike,
        *,
        capabilities: Capabilities,
        config: NotifyConfig | None = None,
        escape: Cleaner | None = None,
        thread: str | None = None,
        on_terminal_delivered: Callable[[str, float], None] | None = None,
    ) -> None:
        self.channel = channel
        self.config = config if config is not None else NotifyConfig()
        self.capabilities = capabilities
        self._counts = NotifierStats()
        self._events = 0
        self._filtered = 0
        self._sender = sender
        self._thread = thread
        self._escape: Cleaner = escape if escape is not None else _identity
        self._edit = capabilities.edit
        self._kinds = self.config.kinds
        self._workspaces = self.config.workspaces
        self._on_terminal_delivered = on_terminal_delivered
        self._agents: dict[str, _Agent] = {}
        self._holding: dict[str, dict[str, _Agent]] = {}
        self._holds: deque[tuple[float, _Agent]] = deque()
        self._summaries: dict[str, _Summary] = {}
        self._finished: dict[str, float] = {}
        self._serial = 0
        self._closed = False
        self._wake: anyio.Event | None = None

    # ------------------------------------------------------------------ observation

    @property
    def stats(self) -> NotifierStats:
        """Counters for ``/metrics`` (a snapshot)."""
        return replace(self._counts, events=self._events, filtered=self._filtered)

    @property
    def live_agents(self) -> int:
        """Agents the notifier holds state for (its memory is bounded by this)."""
        return len(self._agents)

    @property
    def idle(self) -> bool:
        """No hold waiting and no work owed by the sender (for simulations and tests)."""
        if self._holds:
            return False
        if any(a.slot.outstanding for a in self._agents.values()):
            return False
        return not any(s.slot.outstanding for s in self._summaries.values())

    # ------------------------------------------------------------------ the entry point

    def handle(self, event: FleetEvent) -> None:
        """Take one fleet event (synchronous, no I/O; call it from the event loop's thread)."""
        # The hot path (a status change of a live agent whose work is already owed) is a few
        # attribute stores: no await, no queue, no allocation. Keep it that way.
        self._events += 1
        workspaces = self._workspaces
        if event.kind not in self._kinds or (
            workspaces is not None and event.workspace not in workspaces
        ):
            self._filtered += 1
            return
        agent = self._agents.get(event.agent)
        if type(event) is StatusChanged and agent is not None:
            if agent.finished is not None or agent.gone is not None:
                return  # late news about an agent that has ended
            agent.status = event.status
            slot = agent.slot
            slot.version += 1
            if agent.phase == _LIVE and not slot.outstanding and self._edit:
                slot.lost = False  # after a deleted message, this update posts one new one
                self._submit_agent(agent)
            return
        self._handle_rare(event, agent)

    def _handle_rare(self, event: FleetEvent, agent: _Agent | None) -> None:
        if isinstance(event, StatusChanged):
            if agent is None:
                if event.agent in self._finished:
                    return
                agent = self._spawn(event, "")
            elif agent.terminal:
                return
            agent.status = event.status
            agent.slot.version += 1
            if agent.phase == _LIVE:
                self._agent_changed(agent)
        elif isinstance(event, AgentSpawned):
            if agent is not None and not agent.terminal:
                return  # a repeated spawn of a running agent changes nothing
            if agent is not None and agent.phase == _HOLDING:
                # Its previous life ended inside the hold: post that end now, on its own.
                self._holding.get(agent.workspace, {}).pop(agent.name, None)
                agent.phase = _LIVE
                self._submit_agent(agent)
            self._finished.pop(event.agent, None)
            self._spawn(event, event.title)
        elif isinstance(event, (AgentFinished, AgentGone)):
            if agent is None:
                if event.agent in self._finished:
                    return
                agent = self._spawn(event, "")
            elif agent.terminal:
                return
            if isinstance(event, AgentFinished):
                agent.finished = event
            else:
                agent.gone = event.reason
            agent.terminal_at = anyio.current_time()
            agent.slot.version += 1
            self._agent_finalised(agent)

    # ------------------------------------------------------------------ timers

    async def run(self) -> None:
        """Fire hold timers and forget old finished agents; run it beside the sender."""
        self._wake = anyio.Event()
        next_prune = anyio.current_time() + self.config.forget_after
        try:
            while True:
                now = anyio.current_time()
                self._expire_holds(now)
                if now >= next_prune:
                    self._forget(now)
                    next_prune = now + self.config.forget_after
                deadline = min(self._holds[0][0] if self._holds else math.inf, next_prune)
                with anyio.move_on_after(max(0.0, deadline - now)):
                    await self._wake.wait()
                if self._wake.is_set():
                    self._wake = anyio.Event()
        finally:
            self._wake = None

    def _forget(self, now: float) -> None:
        horizon = now - self.config.forget_after
        self._finished = {n: t for n, t in self._finished.items() if t > horizon}
        for workspace, summary in list(self._summaries.items()):
            if (
                summary.running == 0
                and not summary.slot.outstanding
                and summary.latest < now - self.config.window
            ):
                del self._summaries[workspace]

    # ------------------------------------------------------------------ spawns, holds, bursts

    def _new_slot(self, kind: str, name: str) -> _Slot:
        # Keys are unique per notifier too: two notifiers may share one sender (a restart in
        # one process), and must never replace each other's work.
        self._serial += 1
        return _Slot(key=(id(self), kind + ":" + name, self._serial))

    def _spawn(self, event: FleetEvent, title: str) -> _Agent:
        now = anyio.current_time()
        agent = _Agent(event.agent, event.workspace, self._new_slot("agent", event.agent))
        agent.title = title
        agent.spawned_at = now
        agent.slot.post_text = lambda: self._render_agent(agent, post=True)
        agent.slot.edit_text = lambda: self._render_agent(agent, post=False)
        agent.slot.outcome = lambda result: self._agent_outcome(agent, result)
        self._agents[event.agent] = agent
        summary = self._summaries.get(event.workspace)
        if summary is not None and now - summary.latest <= self.config.window:
            self._join(summary, agent, now)
            return agent
        self._holding.setdefault(event.workspace, {})[event.agent] = agent
        was_empty = not self._holds
        self._holds.append((now + self.config.hold, agent))
        if was_empty and self._wake is not None:
            self._wake.set()
        return agent

    def _expire_holds(self, now: float) -> None:
        holds = self._holds
        while holds and holds[0][0] <= now:
            _, agent = holds.popleft()
            if agent.phase != _HOLDING or self._agents.get(agent.name) is not agent:
                continue
            group = self._holding.get(agent.workspace, {})
            if len(group) >= self.config.threshold:
                self._open_summary(agent.workspace, list(group.values()))
                group.clear()
            else:
                group.pop(agent.name, None)
                agent.phase = _LIVE
                self._submit_agent(agent)
            if not group:
                self._holding.pop(agent.workspace, None)

    def _open_summary(self, workspace: str, members: list[_Agent]) -> None:
        self._counts.summaries += 1
        latest = max(member.spawned_at for member in members)
        summary = _Summary(workspace, self._new_slot("summary", workspace), latest=latest)
        summary.slot.post_text = lambda: self._render_summary(summary, post=True)
        summary.slot.edit_text = lambda: self._render_summary(summary, post=False)
        summary.slot.outcome = lambda result: self._summary_outcome(summary, result)
        summary.slot.version = 1
        self._summaries[workspace] = summary
        for member in members:
            self._add_member(summary, member)
        self._submit_summary(summary)

    def _join(self, summary: _Summary, agent: _Agent, now: float) -> None:
        summary.latest = now
        summary.slot.version += 1
        self._add_member(summary, agent)
        self._summary_changed(summary)

    def _add_member(self, summary: _Summary, agent: _Agent) -> None:
        agent.phase = _SUMMARY
        agent.summary = summary
        summary.size += 1
        if len(summary.names) < self.config.summary_names:
            summary.names.append(agent.name)
        if agent.terminal:
            self._count_terminal(summary, agent)
            self._member_finished(summary, agent)
        else:
            summary.running += 1

    # ------------------------------------------------------------------ state changes

    def _agent_changed(self, agent: _Agent) -> None:
        slot = agent.slot
        if not self._edit or slot.outstanding:
            return  # without edits nothing intermediate is shown; queued work renders latest
        slot.lost = False  # after a deleted message, this update posts exactly one new one
        self._submit_agent(agent)

    def _agent_finalised(self, agent: _Agent) -> None:
        if agent.phase == _HOLDING:
            return  # the hold's end renders the final state (or counts it in the summary)
        if agent.phase == _SUMMARY:
            summary = agent.summary
            assert summary is not None
            summary.running -= 1
            summary.slot.version += 1
            self._count_terminal(summary, agent)
            self._member_finished(summary, agent)
            self._summary_changed(summary)
            return
        slot = agent.slot
        if not slot.outstanding:
            self._submit_agent(agent)
        elif slot.priority != TERMINAL:
            self._submit_agent(agent)  # lift queued work to the terminal class, in place

    def _count_terminal(self, summary: _Summary, agent: _Agent) -> None:
        outcome = agent.finished.outcome if agent.finished is not None else None
        if outcome is None:
            summary.gone += 1
        elif outcome is Outcome.DONE:
            summary.done += 1
        elif outcome is Outcome.KILLED:
            summary.killed += 1
        else:
            summary.failed += 1

    def _member_finished(self, summary: _Summary, agent: _Agent) -> None:
        outcome = agent.finished.outcome if agent.finished is not None else None
        if (outcome is not None and outcome.is_failure) or not self._edit:
            # A failure never hides in a count; without edits every agent gets its final post.
            agent.phase = _LIVE
            self._submit_agent(agent)
            return
        summary.awaiting.append((agent.name, agent.terminal_at, summary.slot.version))
        self._retire(agent)

    def _retire(self, agent: _Agent) -> None:
        if self._agents.get(agent.name) is agent:
            del self._agents[agent.name]
        self._finished[agent.name] = anyio.current_time()

    # ------------------------------------------------------------------ submitting

    def _submit_agent(self, agent: _Agent) -> None:
        slot = agent.slot
        if agent.terminal:
            slot.priority = TERMINAL
        elif slot.ref is None:
            slot.priority = NEW
        else:
            slot.priority = UPDATE
        self._submit(slot, slot.ref if self._edit else None)

    def _summary_changed(self, summary: _Summary) -> None:
        slot = summary.slot
        if not self._edit:
            return  # without edits a summary is posted once; members get their own final post
        final = summary.running == 0 or bool(summary.awaiting)
        if not slot.outstanding or (final and slot.priority != TERMINAL):
            self._submit_summary(summary)

    def _submit_summary(self, summary: _Summary) -> None:
        slot = summary.slot
        slot.lost = False
        if summary.running == 0 or summary.awaiting:
            # It carries members' final states: a terminal update for each of them.
            slot.priority = TERMINAL
        else:
            slot.priority = NEW if slot.ref is None else UPDATE
        self._submit(slot, slot.ref)

    def _submit(self, slot: _Slot, edit: MessageRef | None) -> None:
        if self._closed:
            return
        replaced = self._sender.submit(
            slot.key,
            text=slot.post_text if edit is None else slot.edit_text,
            edit=edit,
            priority=slot.priority,
            on_outcome=slot.outcome,
            thread=self._thread,
        )
        if not replaced:
            slot.outstanding += 1

    # ------------------------------------------------------------------ rendering (send time)

    def _render_agent(self, agent: _Agent, *, post: bool) -> str | None:
        slot = agent.slot
        if not slot.owes:
            return None  # nothing new since the last delivery (or the last refusal)
        if not post and slot.ref is None:
            return None  # its message was deleted meanwhile: the outcome turns it into a post
        if post and slot.ref is not None and (self._edit or not agent.terminal):
            # A post whose twin already went out (with edits the update becomes an edit), or,
            # without edits, an intermediate state: only the terminal post may follow the first.
            return None
        slot.rendered = slot.version
        finished = agent.finished
        state = AgentState(
            name=agent.name,
            workspace=agent.workspace,
            title=agent.title,
            status=agent.status,
            outcome=finished.outcome if finished is not None else None,
            cost=finished.cost if finished is not None else 0.0,
            turns=finished.turns if finished is not None else 0,
            gone=agent.gone if finished is None else None,
        )
        caps = self.capabilities
        return render_agent(
            state, clean=self._escape, max_length=caps.max_length, unit=caps.length_unit
        )

    def _render_summary(self, summary: _Summary, *, post: bool) -> str | None:
        slot = summary.slot
        if not slot.owes:
            return None  # nothing new since the last delivery (or the last refusal)
        if post is (slot.ref is not None):
            return None  # a post whose twin went out, or an edit of a lost message
        slot.rendered = slot.version
        counts = SummaryCounts(
            workspace=summary.workspace,
            size=summary.size,
            running=summary.running,
            done=summary.done,
            failed=summary.failed,
            killed=summary.killed,
            gone=summary.gone,
            names=tuple(summary.names),
        )
        caps = self.capabilities
        return render_summary(
            counts, clean=self._escape, max_length=caps.max_length, unit=caps.length_unit
        )

    # ------------------------------------------------------------------ outcomes

    def _settle(self, slot: _Slot, result: MessageRef | ProviderError | None, what: str) -> bool:
        """Apply one send's outcome to ``slot``; False when the channel is finished."""
        slot.outstanding -= 1
        if isinstance(result, MessageRef):
            slot.ref = result
            slot.delivered = slot.rendered
        elif isinstance(result, NotFound):
            self._counts.dropped_refs += 1
            slot.ref = None
            slot.lost = True
        elif isinstance(result, MessageRejected):
            self._refused(slot, what, result)
        elif isinstance(result, ProviderError):
            self._gave_up(result)
            return False
        return True

    def _agent_outcome(self, agent: _Agent, result: MessageRef | ProviderError | None) -> None:
        slot = agent.slot
        if not self._settle(slot, result, f"agent {agent.name!r}") or slot.outstanding:
            return
        if agent.terminal:
            if slot.delivered == slot.version:
                self._terminal_delivered(agent.name, agent.terminal_at)
                self._retire(agent)
            elif slot.refused == slot.version:
                self._retire(agent)  # its final state was refused: nothing is left to send
            else:
                self._submit_agent(agent)
        elif self._edit and slot.owes and not slot.lost:
            self._submit_agent(agent)

    def _summary_outcome(
        self, summary: _Summary, result: MessageRef | ProviderError | None
    ) -> None:
        slot = summary.slot
        if not self._settle(slot, result, f"the summary of workspace {summary.workspace!r}"):
            return
        if isinstance(result, MessageRef) and summary.awaiting:
            still = []
            for name, terminal_at, version in summary.awaiting:
                if version <= slot.delivered:
                    self._terminal_delivered(name, terminal_at)
                else:
                    still.append((name, terminal_at, version))
            summary.awaiting = still
        if slot.outstanding or not self._edit:
            return
        # A lost summary waits for the next change, unless it owes members' final states; a
        # refused one waits for the next change in any case.
        owes_final = summary.running == 0 or bool(summary.awaiting)
        if slot.owes and (not slot.lost or owes_final):
            self._submit_summary(summary)

    def _terminal_delivered(self, name: str, terminal_at: float) -> None:
        self._counts.terminal_delivered += 1
        if self._on_terminal_delivered is not None:
            self._on_terminal_delivered(name, anyio.current_time() - terminal_at)

    def _refused(self, slot: _Slot, what: str, error: MessageRejected) -> None:
        # Logged when a run of refusals starts; a rendering refused on every update (one attempt
        # per update, paced by the sender) repeats only at debug level until a delivery.
        self._counts.rejected += 1
        level = logging.DEBUG if slot.refused > slot.delivered else logging.WARNING
        slot.refused = slot.rendered
        logger.log(
            level,
            "notifier for %r: the platform refused the message for %s (%s); that rendering is "
            "dropped, the channel carries on",
            self.channel,
            what,
            error,
        )

    def _gave_up(self, error: ProviderError) -> None:
        # Only Unreachable and a stopped sender (a TransportError) come back as errors for keyed
        # work: the channel is finished, so stop submitting rather than spin.
        if not self._closed:
            level = logging.DEBUG if isinstance(error, TransportError) else logging.WARNING
            logger.log(level, "notifier for %r stops: %s", self.channel, error)
        self._closed = True


def _identity(text: str) -> str:
    return text
