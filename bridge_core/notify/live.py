"""The state behind each message the notifier keeps current, and what it says at send time.

A message is an agent's live message (``TrackedAgent``) or a burst's summary (``Summary``); its
``Slot`` counts versions of what it should show against what the platform last took or refused.
The text is rendered when the sender takes the work (ADR 0012), so ``agent_text`` and
``summary_text`` first decide whether there is anything to send at all: ``None`` when the latest
version already went out (or was refused), and for the twin of a post that already went out (the
update then becomes an edit).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field

from bridge_core.events import AgentFinished, StatusChanged
from bridge_core.notify.render import (
    AgentState,
    Cleaner,
    SummaryCounts,
    render_agent,
    render_summary,
)
from bridge_core.provider import Capabilities, MessageRef, Priority, ProviderError

__all__ = [
    "Phase",
    "Slot",
    "Summary",
    "TrackedAgent",
    "agent_text",
    "summary_text",
]


class Phase(enum.Enum):
    """Where an agent stands in the notifier's rules (seed ADR 0007)."""

    HOLDING = enum.auto()
    """The agent waits out the hold (no message yet)."""
    LIVE = enum.auto()
    """The agent has (or is getting) its own message."""
    SUMMARY = enum.auto()
    """The agent is counted in a summary, with no message of its own."""


@dataclass(eq=False, slots=True)
class Slot:
    """One message the notifier keeps current: an agent's, or a summary's."""

    key: tuple[int, str, int]
    ref: MessageRef | None = None
    # A change sets ``changed``; reading ``version`` counts it. So a burst of changes between
    # two reads is one version, and a change stores a constant instead of allocating a new
    # int (an agent's status change stores only its news, ``TrackedAgent.version``). Versions
    # are only compared with versions read earlier (rendered, delivered, refused), and two
    # reads differ exactly when a change came between.
    changed: bool = False
    counted: int = 0
    rendered: int = -1
    delivered: int = -1
    refused: int = -1  # the latest version the platform refused (MessageRejected): not resent
    outstanding: int = 0
    priority: Priority = Priority.UPDATE
    lost: bool = False  # its message was deleted; the next update posts a new one
    posting: bool = False  # its work at the sender is a post (no ref), not an edit
    post_text: Callable[[], str | None] = field(default=lambda: None)
    edit_text: Callable[[], str | None] = field(default=lambda: None)
    outcome: Callable[[MessageRef | ProviderError | None], None] = field(default=lambda r: None)

    @property
    def version(self) -> int:
        """The version of what the message should show: it grows with each change."""
        if self.changed:
            self.changed = False
            self.counted += 1
        return self.counted

    @property
    def owes(self) -> bool:
        """Whether its latest version has been neither delivered nor refused by the platform."""
        version = self.version
        return self.delivered < version and self.refused < version


# What an agent's status reads before its first status change: no status yet.
NO_NEWS = StatusChanged("", "", status="")


@dataclass(eq=False, slots=True, kw_only=True)
class TrackedAgent(Slot):
    """An agent the notifier holds state for: its latest news, and its live message's slot,
    which it is itself (the hot path then reads one object per status change, ADR 0157)."""

    name: str
    workspace: str
    phase: Phase = Phase.HOLDING
    title: str = ""
    # The latest status change taken, itself: the notifier's hot path stores the event and
    # nothing else, and the version counts a change by the event's identity (ADR 0168). Events
    # are immutable, and ``counted_news`` holds the event counted last, so an identity seen
    # again is that very event, never a new one at a freed one's address.
    news: StatusChanged = NO_NEWS
    counted_news: StatusChanged = NO_NEWS
    finished: AgentFinished | None = None
    gone: str | None = None
    # ``terminal`` as one field, set with ``finished`` or ``gone``. The notifier's status path
    # does not read it: an ended agent's name leads that path to a sink (ADR 0168).
    ended: bool = False
    terminal_at: float = 0.0
    spawned_at: float = 0.0
    summary: Summary | None = None

    @property
    def status(self) -> str:
        """Its latest status (empty before the first status change)."""
        return self.news.status

    @property
    def version(self) -> int:
        """As ``Slot.version``, a status change counted as a change: the latest news is not
        the news counted last."""
        news = self.news
        if self.changed or news is not self.counted_news:
            self.changed = False
            self.counted_news = news
            self.counted += 1
        return self.counted

    @property
    def terminal(self) -> bool:
        return self.ended

    @property
    def slot(self) -> Slot:
        """Its live message's slot: the agent itself."""
        return self


@dataclass(eq=False, slots=True)
class Summary:
    """A burst's shared message: its members' counts, and the final states it still owes."""

    workspace: str
    slot: Slot
    latest: float  # the latest member's spawn time: the join window runs from it
    names: list[str] = field(default_factory=list)
    size: int = 0
    running: int = 0
    done: int = 0
    failed: int = 0
    killed: int = 0
    gone: int = 0
    # Members whose final state this summary carries: (name, terminal_at, summary version).
    awaiting: list[tuple[str, float, int]] = field(default_factory=list)


def agent_text(
    agent: TrackedAgent,
    *,
    post: bool,
    edit: bool,
    clean: Cleaner,
    capabilities: Capabilities,
) -> str | None:
    """The agent's message as a post (``post``) or an edit, or ``None``: nothing to send."""
    slot = agent.slot
    if not slot.owes:
        return None  # nothing new since the last delivery (or the last refusal)
    if not post and slot.ref is None:
        return None  # its message was deleted meanwhile: the outcome turns it into a post
    if post and slot.ref is not None and (edit or not agent.terminal):
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
    return render_agent(
        state, clean=clean, max_length=capabilities.max_length, unit=capabilities.length_unit
    )


def summary_text(
    summary: Summary, *, post: bool, clean: Cleaner, capabilities: Capabilities
) -> str | None:
    """The summary's message as a post (``post``) or an edit, or ``None``: nothing to send."""
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
    return render_summary(
        counts, clean=clean, max_length=capabilities.max_length, unit=capabilities.length_unit
    )
