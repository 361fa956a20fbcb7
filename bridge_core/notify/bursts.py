"""Holds and burst summaries (ADR 0014): which new agents get a message each, which share one.

Each spawn waits in its workspace's holding group until its own hold ends. If the group then has
``threshold`` or more members, all of them form one summary, edited in place; otherwise that agent
alone gets its live message. A spawn within ``window`` of a summary's latest member joins it at
once. A summary edit that carries a member's final state is a terminal update; failed and crashed
members also get their own post, done, killed and gone members are only counted. Without edits a
summary is posted once and every member gets its own terminal post.

``Bursts`` owns the holding groups, the hold timers and each workspace's latest summary; the
notifier owns the agents, and is called back to give an agent its own message, to retire one and
to count a delivered final state.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Mapping

from bridge_core.events import Outcome
from bridge_core.notify.config import NotifyConfig
from bridge_core.notify.live import (
    Phase,
    Summary,
    TrackedAgent,
    summary_text,
)
from bridge_core.notify.outbox import Outbox
from bridge_core.notify.render import Cleaner
from bridge_core.provider import Capabilities, MessageRef, Priority, ProviderError

__all__ = ["Bursts"]

# Members bound once: reading one off its enum class costs about 80 ns in CPython 3.11, and
# this runs for every event the notifier handles (bench/bench_notify.py).
_HOLDING, _LIVE, _SUMMARY = Phase.HOLDING, Phase.LIVE, Phase.SUMMARY
_TERMINAL, _NEW, _UPDATE = Priority.TERMINAL, Priority.NEW, Priority.UPDATE


class Bursts:
    """One channel's holds and summaries."""

    def __init__(
        self,
        config: NotifyConfig,
        outbox: Outbox,
        *,
        capabilities: Capabilities,
        clean: Cleaner,
        agents: Mapping[str, TrackedAgent],
        submit_agent: Callable[[TrackedAgent], None],
        retire: Callable[[TrackedAgent], None],
        terminal_delivered: Callable[[str, float], None],
    ) -> None:
        """``agents`` is the notifier's live view of its agents; ``submit_agent`` submits an
        agent's own message, ``retire`` forgets an ended agent, ``terminal_delivered`` counts a
        member's final state that reached the channel (its name and when it ended)."""
        self.opened = 0  # summaries opened, for the notifier's stats
        self._config = config
        self._outbox = outbox
        self._capabilities = capabilities
        self._clean = clean
        self._edit = capabilities.edit
        self._agents = agents
        self._submit_agent = submit_agent
        self._retire = retire
        self._terminal_delivered = terminal_delivered
        self._holding: dict[str, dict[str, TrackedAgent]] = {}
        self._holds: deque[tuple[float, TrackedAgent]] = deque()
        self._summaries: dict[str, Summary] = {}

    # ------------------------------------------------------------------ observation

    @property
    def next_hold(self) -> float:
        """When the earliest hold is decided: the first instant after it ends (``inf`` when none
        is waiting)."""
        return math.nextafter(self._holds[0][0], math.inf) if self._holds else math.inf

    @property
    def idle(self) -> bool:
        """No hold waiting and no summary's work owed by the sender."""
        if self._holds:
            return False
        return not any(s.slot.outstanding for s in self._summaries.values())

    # ------------------------------------------------------------------ spawns and holds

    def place(self, agent: TrackedAgent, now: float) -> bool:
        """A new agent joins its workspace's current summary, or waits out its hold; True when
        its hold is now the only one (the timer must be woken to keep it)."""
        summary = self._summaries.get(agent.workspace)
        if summary is not None and now - summary.latest <= self._config.window:
            self._join(summary, agent, now)
            return False
        self._holding.setdefault(agent.workspace, {})[agent.name] = agent
        was_empty = not self._holds
        self._holds.append((now + self._config.hold, agent))
        return was_empty

    def release(self, agent: TrackedAgent) -> None:
        """Take a holding agent out of its group (it gets its own message instead)."""
        self._holding.get(agent.workspace, {}).pop(agent.name, None)

    def expire(self, now: float) -> None:
        """End the holds that ended before ``now``: a large enough group forms a summary, a lone
        agent gets its own message."""
        holds = self._holds
        # A hold includes its last instant, and is decided only after it: a spawn at exactly
        # its end then always counts within it, whichever task the event loop runs first at
        # that instant (the notifier's timer or the spawn's), so a log gives one answer (ADR 0016).
        while holds and holds[0][0] < now:
            _, agent = holds.popleft()
            if agent.phase != _HOLDING or self._agents.get(agent.name) is not agent:
                continue
            group = self._holding.get(agent.workspace, {})
            if len(group) >= self._config.threshold:
                self._open(agent.workspace, list(group.values()))
                group.clear()
            else:
                group.pop(agent.name, None)
                agent.phase = _LIVE
                self._submit_agent(agent)
            if not group:
                self._holding.pop(agent.workspace, None)

    def forget(self, now: float) -> None:
        """Drop summaries that owe nothing and that no spawn can join any more."""
        for workspace, summary in list(self._summaries.items()):
            if (
                summary.running == 0
                and not summary.slot.outstanding
                and summary.latest < now - self._config.window
            ):
                del self._summaries[workspace]

    # ------------------------------------------------------------------ members

    def member_ended(self, agent: TrackedAgent) -> None:
        """A member of a summary finished or went: count it, and show it."""
        summary = agent.summary
        assert summary is not None
        summary.running -= 1
        summary.slot.changed = True
        self._count_terminal(summary, agent)
        self._member_finished(summary, agent)
        self._changed(summary)

    def _open(self, workspace: str, members: list[TrackedAgent]) -> None:
        self.opened += 1
        latest = max(member.spawned_at for member in members)
        summary = Summary(workspace, self._outbox.new_slot("summary", workspace), latest=latest)
        summary.slot.post_text = lambda: self._text(summary, post=True)
        summary.slot.edit_text = lambda: self._text(summary, post=False)
        summary.slot.outcome = lambda result: self._outcome(summary, result)
        summary.slot.changed = True
        self._summaries[workspace] = summary
        for member in members:
            self._add_member(summary, member)
        self._submit(summary)

    def _join(self, summary: Summary, agent: TrackedAgent, now: float) -> None:
        summary.latest = now
        summary.slot.changed = True
        self._add_member(summary, agent)
        self._changed(summary)

    def _add_member(self, summary: Summary, agent: TrackedAgent) -> None:
        agent.phase = _SUMMARY
        agent.summary = summary
        summary.size += 1
        if len(summary.names) < self._config.summary_names:
            summary.names.append(agent.name)
        if agent.terminal:
            self._count_terminal(summary, agent)
            self._member_finished(summary, agent)
        else:
            summary.running += 1

    def _count_terminal(self, summary: Summary, agent: TrackedAgent) -> None:
        outcome = agent.finished.outcome if agent.finished is not None else None
        if outcome is None:
            summary.gone += 1
        elif outcome is Outcome.DONE:
            summary.done += 1
        elif outcome is Outcome.KILLED:
            summary.killed += 1
        else:
            summary.failed += 1

    def _member_finished(self, summary: Summary, agent: TrackedAgent) -> None:
        outcome = agent.finished.outcome if agent.finished is not None else None
        if (outcome is not None and outcome.is_failure) or not self._edit:
            # A failure never hides in a count; without edits every agent gets its final post.
            agent.phase = _LIVE
            self._submit_agent(agent)
            return
        summary.awaiting.append((agent.name, agent.terminal_at, summary.slot.version))
        self._retire(agent)

    # ------------------------------------------------------------------ the summary's message

    def _changed(self, summary: Summary) -> None:
        slot = summary.slot
        if not self._edit:
            return  # without edits a summary is posted once; members get their own final post
        final = summary.running == 0 or bool(summary.awaiting)
        if not slot.outstanding or (final and slot.priority != _TERMINAL):
            self._submit(summary)

    def _submit(self, summary: Summary) -> None:
        slot = summary.slot
        slot.lost = False
        if summary.running == 0 or summary.awaiting:
            # It carries members' final states: a terminal update for each of them.
            slot.priority = _TERMINAL
        else:
            slot.priority = _NEW if slot.ref is None else _UPDATE
        self._outbox.submit(slot, slot.ref)

    def _text(self, summary: Summary, *, post: bool) -> str | None:
        return summary_text(summary, post=post, clean=self._clean, capabilities=self._capabilities)

    def _outcome(self, summary: Summary, result: MessageRef | ProviderError | None) -> None:
        slot = summary.slot
        what = f"the summary of workspace {summary.workspace!r}"
        if not self._outbox.settle(slot, result, what):
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
            self._submit(summary)
