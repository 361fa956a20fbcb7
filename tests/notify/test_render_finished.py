"""A finished agent's line says only what its event reported."""

from __future__ import annotations

import pytest

from bridge_core.events import Outcome
from bridge_core.notify.render import AgentState, render_agent
from bridge_core.provider import LengthUnit


def _final(cost: float, turns: int) -> str:
    state = AgentState("a1", "w1", outcome=Outcome.DONE, cost=cost, turns=turns)
    return render_agent(state, clean=lambda text: text, max_length=4000, unit=LengthUnit.CHARACTERS)


@pytest.mark.parametrize(
    ("cost", "turns", "tail"),
    [
        (0.0, 0, "[w1] done"),
        (0.42, 0, "[w1] done: cost $0.42"),
        (0.0, 1, "[w1] done: 1 turn"),
        (1.5, 7, "[w1] done: cost $1.50, 7 turns"),
    ],
)
def test_cost_and_turns_appear_only_when_reported(cost: float, turns: int, tail: str) -> None:
    assert _final(cost, turns).endswith(tail)
    assert "$0.00" not in _final(cost, turns) and "0 turns" not in _final(cost, turns)
