"""The agent a channel's turns are handed to, named in config as ``module:function``.

An agent is an async callable ``agent(turn, history) -> str``: it receives the ``Turn`` this
gateway owns and the conversation's recent log records (oldest first, the turn itself last) and
returns the reply text. It may stream instead: return an async iterator of text deltas (or be an
async generator), or an object with a ``stream()`` method returning one; the reply then appears
as it is written (``bridge_core.streams``, ADR 0090). When it is at capacity it raises
``bridge_core.ownership.AgentBusy`` (re-exported here; its ``notice``, if given, replaces
``BUSY_NOTICE``); the end user then gets a short busy notice instead of silence.

Exception hierarchy::

    AgentLoadError    the ``module:function`` reference cannot be used
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

from bridge_core.conversation import LogRecord, Turn
from bridge_core.errors import BridgeError
from bridge_core.ownership import AgentBusy

__all__ = [
    "BUSY_NOTICE",
    "Agent",
    "AgentBusy",
    "AgentLoadError",
    "echo_agent",
    "load_agent",
]

Agent = Callable[[Turn, Sequence[LogRecord]], Awaitable[object] | AsyncIterator[str]]
"""Returns (or resolves to) a ``str``, an async iterator of ``str`` deltas, or an object with
``stream()`` returning one."""

BUSY_NOTICE = "⏳ The agent is busy right now; please try again in a moment."


class AgentLoadError(BridgeError):
    """An agent reference in config that cannot be imported or is not an async callable."""


async def echo_agent(turn: Turn, history: Sequence[LogRecord]) -> str:
    """Answers with what the user said and how many turns the conversation has had."""
    turns = sum(1 for record in history if isinstance(record, Turn))
    return f"echo: {turn.text} (turn {max(turns, 1)} of this conversation)"


def load_agent(reference: str) -> Agent:
    """Import ``module:function`` (``module:object.attribute`` works too)."""
    module_name, sep, attribute = reference.partition(":")
    if not sep or not module_name or not attribute:
        raise AgentLoadError(
            f"agent {reference!r} must be 'module:function', "
            "e.g. 'bridge_core.runtime.agents:echo_agent'"
        )
    try:
        target: object = importlib.import_module(module_name)
    except ImportError as exc:
        raise AgentLoadError(f"agent {reference!r}: cannot import {module_name!r}: {exc}") from exc
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise AgentLoadError(
                f"agent {reference!r}: {module_name!r} has no {attribute!r}"
            ) from None
    if not callable(target):
        raise AgentLoadError(f"agent {reference!r} is not callable")
    call = getattr(target, "__call__", None)  # noqa: B004 - callable objects with async __call__
    if not any(
        check(candidate)
        for check in (inspect.iscoroutinefunction, inspect.isasyncgenfunction)
        for candidate in (target, call)
    ):
        raise AgentLoadError(
            f"agent {reference!r} must be an async function: async def f(turn, history) -> str "
            "(or an async generator of text deltas, to stream the reply)"
        )
    return target
