"""The notifier (seed ADR 0007): one live message per agent, burst summaries, paced by a sender.

``handle_all(events)`` (the gateway's entry: a request's batch, a stream entry's) and
``handle(event)`` are synchronous and cheap: each event updates the agent's latest state and,
only when the agent has no work at the sender, submits one supersedable piece of work whose text is
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
  state posts at once, since nothing terminal is lost). A post answered ``NotFound`` (no channel
  or thread to post in) is read as ``MessageRejected``: that rendering is dropped.
- ``MessageRejected`` drops that rendering only: it is logged (channel, agent, reason), the
  message keeps its ref (a refused post leaves none), and the next update renders again. The
  refused version is never resent, so a rendering the platform always refuses costs one attempt
  per update, paced by the sender; a refused terminal state ends the agent's message there.
- Terminal work goes at the top priority, new messages next, intermediate edits last, so after
  a pause or an outage the terminal states go first, then each running agent's current state.
- Without edit support: one post at spawn (or a place in a summary) and one terminal post.
- Message refs live only in memory: after a restart a running agent gets a fresh message.

The notifier routes events and keeps the agents; ``live`` holds the per-message state and decides
what a message says when the sender takes it, ``bursts`` the holds and summaries, and ``outbox``
the traffic with the sender (keys, outcomes, refusals).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import length_hint

import anyio

from bridge_core.events import (
    AgentFinished,
    AgentGone,
    AgentSpawned,
    FleetEvent,
    StatusChanged,
)
from bridge_core.notify.bursts import Bursts
from bridge_core.notify.config import NotifyConfig
from bridge_core.notify.live import Phase, Slot, TrackedAgent, agent_text
from bridge_core.notify.outbox import Outbox
from bridge_core.notify.protocol import SenderLike
from bridge_core.notify.render import Cleaner
from bridge_core.provider import Capabilities, MessageRef, Priority, ProviderError

__all__ = ["Notifier", "NotifierStatistics"]

# Members bound once: reading one off its enum class costs about 80 ns in CPython 3.11, and
# this runs for every event the notifier handles (bench/bench_notify.py).
_HOLDING, _LIVE, _SUMMARY = Phase.HOLDING, Phase.LIVE, Phase.SUMMARY
_TERMINAL, _NEW, _UPDATE = Priority.TERMINAL, Priority.NEW, Priority.UPDATE


@dataclass(frozen=True, slots=True)
class NotifierStatistics:
    """``Notifier.statistics()``: its counters, then the live messages it holds when asked."""

    events: int
    filtered: int
    summaries: int
    terminal_delivered: int
    dropped_refs: int
    rejected: int
    live: int


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
        # Events are counted once each as they arrive, and those filtered once more.
        # The counts are floats, exact to 2**53 events: an int above 256 is a new object at each
        # increment, a float comes off a free list, and ``handle`` counts every event
        # (bench/bench_notify.py).
        self._events = 0.0
        self._filtered = 0.0
        self._terminal_delivered_count = 0
        self._escape: Cleaner = escape if escape is not None else _identity
        self._edit = capabilities.edit
        self._kinds = self.config.kinds
        # The class ``handle`` takes its fast path for (``None``: status changes do not notify).
        self._status_class = StatusChanged if StatusChanged.kind in self._kinds else None
        # Classes whose kind does not notify, learnt as they come: ``kind`` is a class attribute
        # (the dataclasses have slots), so the class decides, and such an event is counted as
        # filtered with no field read.
        self._quiet: set[type[FleetEvent]] = set()
        self._workspaces = self.config.workspaces
        self._on_terminal_delivered = on_terminal_delivered
        self._agents: dict[str, TrackedAgent] = {}
        # ``handle``'s status path's view of ``_agents``, the same names: an agent not ended
        # maps to itself, an ended one to ``_sink``, which absorbs late news (a store no one
        # reads) and owes work for ever, so the path stops there with no test of its own
        # (ADR 0168). ``handle_all`` reads it only for a name its own view lacks.
        self._running: dict[str, TrackedAgent] = {}
        self._sink = TrackedAgent(key=(id(self), "ended", 0), name="", workspace="", outstanding=1)
        # ``handle_all``'s view: the names whose status change is a store of the news and
        # nothing more, each as it maps in ``_running``. An agent whose message is live, with
        # edits, and that owes the sender nothing (idle) is left out, so its status change
        # misses and the miss submits it; every other agent owes work, holds, sits in a summary
        # or never edits, and the sink stands for an ended one. The status path then has no
        # ``outstanding`` test (ADR 0177). ``_keep_store_only`` keeps it after each submission
        # and outcome, the only places an agent becomes idle or stops being idle.
        self._store_only: dict[str, TrackedAgent] = {}
        self._finished: dict[str, float] = {}
        self._wake: anyio.Event | None = None
        self._holds_ended = False
        self._outbox = Outbox(channel, sender, thread=thread)
        # Bound once, so the hot path reaches the sender with no more lookups than a method of
        # its own would cost.
        self._submit: Callable[[Slot, MessageRef | None], None] = self._outbox.submit
        self._bursts = Bursts(
            self.config,
            self._outbox,
            capabilities=capabilities,
            clean=self._escape,
            agents=self._agents,
            submit_agent=self._submit_agent,
            retire=self._retire,
            terminal_delivered=self._terminal_delivered,
        )

    # ------------------------------------------------------------------ observation

    def statistics(self) -> NotifierStatistics:
        """What it has done, and how many agents' live messages it holds."""
        return NotifierStatistics(
            events=int(self._events),
            filtered=int(self._filtered),
            summaries=self._bursts.opened,
            terminal_delivered=self._terminal_delivered_count,
            dropped_refs=self._outbox.dropped_refs,
            rejected=self._outbox.rejected,
            live=len(self._agents),
        )

    def live_view(self) -> list[dict[str, str]]:
        """The agents it holds, latest first: name, workspace, where they stand, their status."""
        agents = sorted(self._agents.values(), key=lambda agent: -agent.spawned_at)
        return [
            {
                "agent": agent.name,
                "workspace": agent.workspace,
                "phase": agent.phase.name.lower(),
                "status": agent.status,
                "outcome": agent.finished.outcome.value if agent.finished else "",
                "gone": agent.gone or "",
            }
            for agent in agents
        ]

    @property
    def live_agents(self) -> int:
        """Agents the notifier holds state for (its memory is bounded by this)."""
        return len(self._agents)

    @property
    def idle(self) -> bool:
        """No hold waiting and no work owed by the sender (for simulations and tests)."""
        if not self._bursts.idle:
            return False
        return not any(a.slot.outstanding for a in self._agents.values())

    # ------------------------------------------------------------------ the entry point

    def handle(self, event: FleetEvent) -> None:
        """Take one fleet event (synchronous, no I/O; call it from the event loop's thread).
        The gateway hands over whole batches through ``handle_all``, which decides alike."""
        # ``handle_all`` with the per-event path written out again: a one-event call of
        # ``handle_all`` costs twice what this does (ADR 0157), and simulations and tests take
        # events one at a time. tests/notify/test_batches.py holds the two to the same
        # decisions and counts.
        self._events += 1.0
        cls = type(event)
        if cls is self._status_class:
            workspaces = self._workspaces
            if workspaces is not None and event.workspace not in workspaces:
                self._filtered += 1.0
                return
            try:
                agent = self._running[event.agent]
                agent.news = event  # type: ignore[assignment]  # a StatusChanged
                if agent.outstanding:
                    return
            except KeyError:
                self._handle_rare(event, None)
                return
            if agent.phase is _LIVE and self._edit:
                agent.lost = False  # after a deleted message, this update posts one new one
                self._submit_agent(agent)
            return
        if cls in self._quiet or self._filters_out(event):
            self._filtered += 1.0
            return
        self._handle_rare(event, self._agents.get(event.agent))

    def handle_all(self, events: Sequence[FleetEvent]) -> None:
        """Take a batch of fleet events, in order, deciding each as ``handle`` would
        (synchronous, no I/O). The gateway's entry: a request's events, a stream entry's."""
        # The hot path (a status change of an agent whose work is already owed) is one lookup
        # and one store: no await, no queue, no allocation. Keep it that way. The event's class
        # is tested before any field is read, so the fields read after each test see one class
        # and CPython 3.11 specialises each read (a read that sees several classes takes the
        # slow generic path); an event of a kind that does not notify is known by its class
        # alone. The agent is found in ``_store_only``, which holds exactly the names whose
        # status change is only a store (an ended agent's name leads to the sink): the event
        # itself is the agent's news, so no status or change flag is stored (ADR 0168), and no
        # ``outstanding``, phase or ``ended`` is read (ADR 0177). A name it lacks (an idle
        # agent, or one not held) goes to ``_status_missed``, which decides as ``handle`` does.
        # The class is read again for an event that is not a status change rather than kept
        # in a local: a store and a load on every event cost more than a second ``type()`` on
        # the others (ADR 0177).
        #
        # The loop is written twice, with a workspace filter and without, so that no event
        # tests whether there is one (ADR 0168); tests/notify/test_batches.py runs both against
        # ``handle``. What each event would read of the notifier is read once per batch, and
        # the counts are stored once per batch (ADR 0157): the events are counted by their
        # number, and the filtered ones in a local. An event that raises has been counted as
        # arrived (not as filtered), as ``handle`` counts it, and the events after it are not
        # taken: the error goes to the caller, with the counts of what was reached stored on
        # the way.
        status_class = self._status_class
        workspaces = self._workspaces
        store_only = self._store_only
        quiet = self._quiet
        filtered = 0
        remaining = iter(events)
        try:
            if workspaces is None:
                for event in remaining:
                    if type(event) is status_class:
                        try:
                            store_only[event.agent].news = event
                        except KeyError:
                            self._status_missed(event)
                        continue
                    if type(event) in quiet or self._filters_out(event):
                        filtered += 1
                        continue
                    self._handle_rare(event, self._agents.get(event.agent))
            else:
                for event in remaining:
                    if type(event) is status_class:
                        if event.workspace not in workspaces:
                            filtered += 1
                            continue
                        try:
                            store_only[event.agent].news = event
                        except KeyError:
                            self._status_missed(event)
                        continue
                    if type(event) in quiet or self._filters_out(event):
                        filtered += 1
                        continue
                    self._handle_rare(event, self._agents.get(event.agent))
        except BaseException:
            # A sequence's iterator knows exactly how many items it has left.
            self._events += len(events) - length_hint(remaining)
            self._filtered += filtered
            raise
        self._events += len(events)
        if filtered:
            self._filtered += filtered

    def _filters_out(self, event: FleetEvent) -> bool:
        """Whether an event of a class not known to be quiet is filtered (by kind or by
        workspace); a class whose kind does not notify is learnt as quiet."""
        cls = type(event)
        if cls.kind not in self._kinds:
            self._quiet.add(cls)
            return True
        workspaces = self._workspaces
        return workspaces is not None and event.workspace not in workspaces

    def _status_missed(self, event: StatusChanged) -> None:
        """A status change whose name ``_store_only`` lacks: an idle agent's (submitted now,
        as ``handle`` submits it), or one of a name not held (the rare path)."""
        agent = self._running.get(event.agent)
        if agent is None:
            self._handle_rare(event, None)
            return
        agent.news = event
        if agent.outstanding:
            return
        if agent.phase is _LIVE and self._edit:
            agent.lost = False  # after a deleted message, this update posts exactly one new one
            self._submit_agent(agent)

    def _handle_rare(self, event: FleetEvent, agent: TrackedAgent | None) -> None:
        if isinstance(event, StatusChanged):
            if agent is None:
                if event.agent in self._finished:
                    return
                agent = self._spawn(event, "")
            elif agent.terminal:
                return
            agent.news = event
            agent.slot.changed = True
            if agent.phase == _LIVE:
                self._agent_changed(agent)
        elif isinstance(event, AgentSpawned):
            if agent is not None and not agent.terminal:
                return  # a repeated spawn of a running agent changes nothing
            if agent is not None and agent.phase == _HOLDING:
                # Its previous life ended inside the hold: post that end now, on its own.
                self._bursts.release(agent)
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
            agent.ended = True
            self._running[agent.name] = self._store_only[agent.name] = self._sink
            agent.terminal_at = anyio.current_time()
            agent.slot.changed = True
            self._agent_finalised(agent)

    # ------------------------------------------------------------------ timers

    def end_holds(self) -> None:
        """No more spawns will come (the gateway is stopping): end every hold now, so each
        group formed so far becomes its summary or its agents' own messages, instead of the
        stop waiting out holds that can no longer gather anyone. Spawns after this are not
        held either."""
        self._holds_ended = True
        if self._wake is not None:
            self._wake.set()

    async def run(self) -> None:
        """Fire hold timers and forget old finished agents; run it beside the sender."""
        self._wake = anyio.Event()
        next_prune = anyio.current_time() + self.config.forget_after
        try:
            while True:
                # One cancel scope serves every wake until its deadline passes, its deadline
                # moved only when the next timer moves: a wake (each spawn's hold) then costs an
                # event, not a scope's setup and teardown (ADR 0177).
                with anyio.CancelScope() as timer:
                    while True:
                        now = anyio.current_time()
                        self._bursts.expire(math.inf if self._holds_ended else now)
                        if now >= next_prune:
                            self._forget(now)
                            next_prune = now + self.config.forget_after
                        deadline = min(self._bursts.next_hold, next_prune)
                        if timer.deadline != deadline:
                            timer.deadline = deadline
                        await self._wake.wait()
                        self._wake = anyio.Event()
                if self._wake.is_set():
                    self._wake = anyio.Event()
        finally:
            self._wake = None

    def _forget(self, now: float) -> None:
        horizon = now - self.config.forget_after
        self._finished = {n: t for n, t in self._finished.items() if t > horizon}
        self._bursts.forget(now)

    # ------------------------------------------------------------------ agents

    def _spawn(self, event: FleetEvent, title: str) -> TrackedAgent:
        now = anyio.current_time()
        key = self._outbox.new_key("agent", event.agent)
        agent = TrackedAgent(key=key, name=event.agent, workspace=event.workspace)
        agent.title = title
        agent.spawned_at = now
        agent.slot.post_text = lambda: self._render_agent(agent, post=True)
        agent.slot.edit_text = lambda: self._render_agent(agent, post=False)
        agent.slot.outcome = lambda result: self._agent_outcome(agent, result)
        self._agents[event.agent] = agent
        self._running[event.agent] = self._store_only[event.agent] = agent
        if (self._bursts.place(agent, now) or self._holds_ended) and self._wake is not None:
            self._wake.set()
        return agent

    def _agent_changed(self, agent: TrackedAgent) -> None:
        slot = agent.slot
        if not self._edit or slot.outstanding:
            return  # without edits nothing intermediate is shown; queued work renders latest
        slot.lost = False  # after a deleted message, this update posts exactly one new one
        self._submit_agent(agent)

    def _agent_finalised(self, agent: TrackedAgent) -> None:
        if agent.phase == _HOLDING:
            return  # the hold's end renders the final state (or counts it in the summary)
        if agent.phase == _SUMMARY:
            self._bursts.member_ended(agent)
            return
        slot = agent.slot
        if not slot.outstanding:
            self._submit_agent(agent)
        elif slot.priority != _TERMINAL:
            self._submit_agent(agent)  # lift queued work to the terminal class, in place

    def _retire(self, agent: TrackedAgent) -> None:
        if self._agents.get(agent.name) is agent:
            del self._agents[agent.name]
            del self._running[agent.name]
            self._store_only.pop(agent.name, None)
        self._finished[agent.name] = anyio.current_time()

    def _submit_agent(self, agent: TrackedAgent) -> None:
        slot = agent.slot
        ended = agent.ended
        if ended:
            slot.priority = _TERMINAL
        elif slot.ref is None:
            slot.priority = _NEW
        else:
            slot.priority = _UPDATE
        self._submit(slot, slot.ref if self._edit else None)
        if ended and not slot.outstanding:
            # A submission the sender took always leaves work owed; none means the outbox is
            # closed (the channel was given up), so no outcome will ever retire it (ADR 0015).
            self._retire(agent)
            return
        self._keep_store_only(agent)

    def _keep_store_only(self, agent: TrackedAgent) -> None:
        """After ``agent``'s work or phase changed: in ``_store_only`` unless it is idle (live,
        with edits, owing nothing), when its next status change must submit it."""
        if self._running.get(agent.name) is not agent:
            return  # ended (the sink stands for it) or no longer held
        if agent.outstanding or agent.phase is not _LIVE or not self._edit:
            self._store_only[agent.name] = agent
        else:
            self._store_only.pop(agent.name, None)

    def _render_agent(self, agent: TrackedAgent, *, post: bool) -> str | None:
        return agent_text(
            agent, post=post, edit=self._edit, clean=self._escape, capabilities=self.capabilities
        )

    # ------------------------------------------------------------------ outcomes

    def _agent_outcome(
        self, agent: TrackedAgent, result: MessageRef | ProviderError | None
    ) -> None:
        try:
            self._settle_agent(agent, result)
        finally:
            self._keep_store_only(agent)  # an outcome is where an agent's work comes back

    def _settle_agent(self, agent: TrackedAgent, result: MessageRef | ProviderError | None) -> None:
        slot = agent.slot
        if not self._outbox.settle(slot, result, f"agent {agent.name!r}"):
            if agent.ended and not slot.outstanding:
                self._retire(agent)  # the channel is finished: nothing more will come back
            return
        if slot.outstanding:
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

    def _terminal_delivered(self, name: str, terminal_at: float) -> None:
        self._terminal_delivered_count += 1
        if self._on_terminal_delivered is not None:
            self._on_terminal_delivered(name, anyio.current_time() - terminal_at)


def _identity(text: str) -> str:
    return text
