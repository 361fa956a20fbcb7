"""The text of live messages, failure posts and summaries.

Everything an agent controls (its name, workspace, title, status, reason) is defused first (no
``@everyone``/``@here``/``@channel``, no ``<!channel>`` or ``<@user>`` tokens, so an agent name
never pings anyone) and then passed through the provider's own ``escape``; long fields are
clipped and the whole text is cut to the provider's maximum in its length unit.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bridge_core.events import Outcome
from bridge_core.provider import LengthUnit
from bridge_core.text import chunk, measure, neutralise_mass_mentions

__all__ = [
    "AgentState",
    "Cleaner",
    "SummaryCounts",
    "defuse",
    "render_agent",
    "render_summary",
]

ZWSP = "\u200b"
_TOKEN = re.compile(r"<([!@#])")

Cleaner = Callable[[str], str]

ICONS = {
    Outcome.DONE: "\u2705",  # check mark
    Outcome.FAILED: "\u274c",  # cross
    Outcome.CRASHED: "\U0001f4a5",  # collision
    Outcome.KILLED: "\u23f9\ufe0f",  # stop
}
RUNNING_ICON = "\U0001f504"  # arrows
GONE_ICON = "\U0001f44b"  # wave
SUMMARY_ICON = "\U0001f4e6"  # package


def defuse(text: str) -> str:
    """Break mass mentions and mention tokens with a zero-width space."""
    return _TOKEN.sub("<" + ZWSP + r"\1", neutralise_mass_mentions(text))


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


@dataclass(frozen=True, slots=True)
class AgentState:
    name: str
    workspace: str
    title: str = ""
    status: str = ""
    outcome: Outcome | None = None
    cost: float = 0.0
    turns: int = 0
    gone: str | None = None  # the reason, when it went without finishing


@dataclass(frozen=True, slots=True)
class SummaryCounts:
    workspace: str
    size: int
    running: int
    done: int
    failed: int
    killed: int
    gone: int
    names: Sequence[str]


def _fit(text: str, max_length: int, unit: LengthUnit) -> str:
    if measure(text, unit) <= max_length:
        return text
    return chunk(text, max_length, unit=unit)[0]


def render_agent(state: AgentState, *, clean: Cleaner, max_length: int, unit: LengthUnit) -> str:
    """An agent's live message: who it is, and its latest state (final: outcome, cost, turns)."""
    name = clean(defuse(_clip(state.name, 100)))
    where = clean(defuse(_clip(state.workspace, 60)))
    if state.outcome is not None:
        head = f"{ICONS[state.outcome]} {name} [{where}] {state.outcome.value}"
        # Only what the event reported: no "cost $0.00, 0 turns" for an agent that gave neither.
        details = [f"cost ${state.cost:.2f}"] if state.cost else []
        if state.turns:
            details.append(f"{state.turns} turn{'' if state.turns == 1 else 's'}")
        text = f"{head}: {', '.join(details)}" if details else head
    elif state.gone is not None:
        reason = clean(defuse(_clip(state.gone, 300))) if state.gone else "no reason given"
        text = f"{GONE_ICON} {name} [{where}] gone: {reason}"
    else:
        status = clean(defuse(_clip(state.status, 500))) if state.status else "started"
        text = f"{RUNNING_ICON} {name} [{where}] running: {status}"
    if state.title:
        text += "\n" + clean(defuse(_clip(state.title, 200)))
    return _fit(text, max_length, unit)


def render_summary(
    counts: SummaryCounts, *, clean: Cleaner, max_length: int, unit: LengthUnit
) -> str:
    """A burst's shared message: counts of done, running and failed, and who is in it."""
    where = clean(defuse(_clip(counts.workspace, 60)))
    parts = [f"{counts.done} done", f"{counts.running} running", f"{counts.failed} failed"]
    if counts.killed:
        parts.append(f"{counts.killed} killed")
    if counts.gone:
        parts.append(f"{counts.gone} gone")
    text = f"{SUMMARY_ICON} {counts.size} agents in [{where}]: " + ", ".join(parts)
    shown = ", ".join(clean(defuse(_clip(n, 60))) for n in counts.names)
    more = counts.size - len(counts.names)
    text += f"\nagents: {shown}" + (f" and {more} more" if more > 0 else "")
    return _fit(text, max_length, unit)
