"""Fleet events: the JSON round trip, unknown kinds accepted, errors naming the field."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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
    parse_checked_event,
    parse_checked_events,
    parse_event,
    parse_event_line,
)
from bridge_core.text import find_invalid_text

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
        ({"kind": "AgentSpawned", "agent": "a", "at": 10**400}, "at"),  # past any float
        ({"kind": "AgentFinished", "agent": "a", "outcome": "done", "cost": -(10**400)}, "cost"),
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


FIELD_VALUES = (
    st.none()
    | st.booleans()
    | st.integers(-3, 3)
    | st.integers(min_value=10**308, max_value=10**400)  # past any float
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from(["", " ", "x", "done", "killed", "StatusChanged", "AgentFinished"])
    | st.text(max_size=5)
    | st.lists(st.integers(), max_size=2)
)
EVENT_FIELDS = st.dictionaries(
    st.sampled_from(
        ["kind", "agent", "workspace", "at", "status", "title", "outcome", "cost", "turns",
         "reason", "text", "tool", "ok", "error", "extra"]
    ),
    FIELD_VALUES,
    max_size=8,
)  # fmt: skip
KINDS = st.sampled_from([*(e.kind for e in EVENTS), "AgentTeleported", "", 3, None])


@settings(deadline=None)  # what it checks is agreement, not time (a loaded host is slow)
@given(EVENT_FIELDS, KINDS, st.sampled_from(["a1", "", None, 7]))
def test_the_checked_parse_reads_and_refuses_exactly_as_parse_event(
    data: dict[str, Any], kind: object, agent: object
) -> None:
    # The HTTP API checks a body's text once and reads each event with parse_checked_event:
    # every event it reads, and every error naming a field, must be parse_event's own.
    data = {**data, "kind": kind, "agent": agent}
    if find_invalid_text(data) is not None:
        return  # the caller refuses those before (test_text_valid.py)
    try:
        expected: FleetEvent | EventError = parse_event(data)
    except EventError as error:
        expected = error
    try:
        got: FleetEvent | EventError = parse_checked_event(data)
    except EventError as error:
        got = error
    if isinstance(expected, EventError):
        assert isinstance(got, EventError)
        assert (got.field, got.message) == (expected.field, expected.message)
    else:
        assert got == expected
        assert type(got) is type(expected)


def test_a_status_change_made_from_its_slots_is_the_dataclass_one() -> None:
    made = parse_checked_event({"kind": "StatusChanged", "agent": "a", "status": "s", "at": 2})
    assert made == StatusChanged("a", "default", 2.0, status="s")
    assert hash(made) == hash(StatusChanged("a", "default", 2.0, status="s"))
    assert repr(made) == repr(StatusChanged("a", "default", 2.0, status="s"))
    assert type(made) is StatusChanged
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.status = "changed"  # type: ignore[misc]


# Items shaped like a fleet's status changes (the batch reader's own path), with any value in any
# field, beside items of every other shape.
STATUS_LIKE = st.fixed_dictionaries(
    {
        "kind": st.sampled_from(["StatusChanged", "StatusChanged", "statuschanged", 3]),
        "agent": FIELD_VALUES | st.just("a1"),
        "status": FIELD_VALUES | st.just("running"),
    },
    optional={"workspace": FIELD_VALUES, "at": FIELD_VALUES, "extra": FIELD_VALUES},
)
BATCH_ITEMS = STATUS_LIKE | EVENT_FIELDS | FIELD_VALUES


@settings(deadline=None)  # what it checks is agreement, not time (a loaded host is slow)
@given(st.lists(BATCH_ITEMS, max_size=6))
def test_a_batch_reads_and_refuses_exactly_as_each_event_alone(items: list[Any]) -> None:
    # POST /v1/events reads an array with parse_checked_events: the same events as reading each
    # item with parse_checked_event, or the first item's own error with that item's index.
    if find_invalid_text(items) is not None:
        return  # the caller refuses those before (test_text_valid.py)
    expected: list[FleetEvent] = []
    refused: tuple[int, str, str] | None = None
    for index, item in enumerate(items):
        try:
            expected.append(parse_checked_event(item))
        except EventError as error:
            refused = (index, error.field, error.message)
            break
    try:
        got = parse_checked_events(items)
    except EventError as error:
        assert (error.index, error.field, error.message) == refused
        return
    assert refused is None
    assert got == expected
    assert [type(event) for event in got] == [type(event) for event in expected]
    for event in got:
        assert hash(event) == hash(dataclasses.replace(event))


def test_a_batch_of_status_changes_is_made_of_the_dataclass_ones() -> None:
    got = parse_checked_events(
        [
            {"kind": "StatusChanged", "agent": "a", "status": "s"},
            {"kind": "StatusChanged", "agent": "b", "status": "t", "workspace": "", "at": None},
            {"kind": "StatusChanged", "agent": "c", "status": "u", "workspace": "w", "at": 3},
        ]
    )
    assert got == [
        StatusChanged("a", "default", None, status="s"),
        StatusChanged("b", "default", None, status="t"),
        StatusChanged("c", "w", 3.0, status="u"),
    ]
    assert all(type(event) is StatusChanged for event in got)
    assert repr(got[0]) == repr(StatusChanged("a", "default", None, status="s"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        got[0].agent = "other"  # type: ignore[misc]


def test_a_refused_item_of_a_batch_is_named_by_its_index() -> None:
    with pytest.raises(EventError) as refused:
        parse_checked_events(
            [
                {"kind": "StatusChanged", "agent": "a", "status": "s"},
                {"kind": "StatusChanged", "agent": "b", "status": ""},
            ]
        )
    assert (refused.value.index, refused.value.field) == (1, "status")
    with pytest.raises(EventError) as alone:
        parse_checked_event({"kind": "StatusChanged", "agent": "b", "status": ""})
    assert alone.value.index is None
