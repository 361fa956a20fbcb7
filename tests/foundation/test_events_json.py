"""Fleet events: the JSON round trip, unknown kinds accepted, errors naming the field."""

from __future__ import annotations

import json

import pytest

from bridge_core.events import (
    NOTIFYING_KINDS,
    AgentFinished,
    AgentGone,
    AgentInit,
    AgentSpawned,
    EventError,
    FleetEvent,
    Outcome,
    Output,
    RepoHealth,
    StatusChanged,
    StorePersistFailed,
    ToolFinished,
    ToolStarted,
    UnknownEvent,
    event_to_json,
    parse_event,
    parse_event_line,
)

EVENTS: list[FleetEvent] = [
    AgentSpawned("a1", "alpha", 1767225600.5, title="fix the build"),
    StatusChanged("a1", "alpha", None, status="running tests"),
    AgentFinished("a1", "alpha", 1.0, outcome=Outcome.CRASHED, cost=0.42, turns=7),
    AgentGone("a1", "alpha", None, reason="host lost"),
    Output("a2", "beta", None, text="line of output ✅"),
    ToolStarted("a2", "default", None, tool="bash"),
    ToolFinished("a2", "default", None, tool="bash", ok=False),
    AgentInit("a3"),
    StorePersistFailed("a3", "default", None, error="disk full"),
    RepoHealth("a3", "default", None, status="dirty"),
]


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: e.kind)
def test_every_kind_round_trips_through_json(event: FleetEvent) -> None:
    line = json.dumps(event_to_json(event))
    assert parse_event_line(line) == event
    assert parse_event(json.loads(line)) == event


def test_unknown_kinds_are_accepted_kept_and_round_trip() -> None:
    data = {"kind": "AgentTeleported", "agent": "a9", "where": "mars", "at": 5.0}
    event = parse_event(data)
    assert isinstance(event, UnknownEvent)
    assert (event.unknown_kind, event.agent, event.workspace) == (
        "AgentTeleported",
        "a9",
        "default",
    )
    assert event.data == {"where": "mars"}
    assert event_to_json(event) == {**data, "workspace": "default"}


def test_only_the_four_lifecycle_kinds_notify_by_default() -> None:
    assert NOTIFYING_KINDS == {"AgentSpawned", "StatusChanged", "AgentFinished", "AgentGone"}


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"agent": "a"}, "kind"),
        ({"kind": "AgentSpawned"}, "agent"),
        ({"kind": "AgentSpawned", "agent": 3}, "agent"),
        ({"kind": "AgentFinished", "agent": "a", "outcome": "exploded"}, "outcome"),
        ({"kind": "AgentFinished", "agent": "a", "outcome": "done", "turns": -1}, "turns"),
        ({"kind": "AgentFinished", "agent": "a", "outcome": "done", "cost": "NaN"}, "cost"),
        ({"kind": "StatusChanged", "agent": "a"}, "status"),
        ({"kind": "ToolFinished", "agent": "a", "ok": "yes"}, "ok"),
        ({"kind": "AgentSpawned", "agent": "a", "at": float("inf")}, "at"),
        (["not", "an", "object"], "event"),
    ],
)
def test_bad_events_name_the_field(data: object, field: str) -> None:
    with pytest.raises(EventError) as caught:
        parse_event(data)
    assert caught.value.field == field


def test_a_line_that_is_not_json_says_so() -> None:
    with pytest.raises(EventError, match="not valid JSON"):
        parse_event_line("{kind: oops")
