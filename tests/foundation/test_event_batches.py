"""The shortcut for batches of plain status changes (ADR 0150): where it answers, the general
reader reads the same events; everything else is left to the general reader."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge_core.event_batches import status_batch
from bridge_core.events import StatusChanged, parse_checked_events
from bridge_core.text import find_invalid_text


def general(raw: bytes) -> Any:
    """What the route's general reader makes of ``raw``: its events, or the exception."""
    try:
        data = json.loads(raw.decode("utf-8"))
        if find_invalid_text(data) is not None:
            return "invalid text"
        if not isinstance(data, list):
            return "not a batch"
        return parse_checked_events(data)
    except Exception as exc:
        return exc


def test_a_plain_batch_is_read_as_its_status_changes() -> None:
    raw = json.dumps(
        [
            {"kind": "StatusChanged", "agent": "a1", "status": "step 1"},
            {"kind": "StatusChanged", "agent": "a2", "status": "ü ✅", "workspace": "w"},
            {"kind": "StatusChanged", "agent": "a3", "status": "x", "workspace": "", "at": None},
        ],
        ensure_ascii=False,
    ).encode()
    events = status_batch(raw)
    assert events == [
        StatusChanged("a1", "default", None, status="step 1"),
        StatusChanged("a2", "w", None, status="ü ✅"),
        StatusChanged("a3", "default", None, status="x"),
    ]
    assert events == general(raw)
    assert all(type(e) is StatusChanged for e in events)
    assert [hash(e) for e in events] == [hash(e) for e in general(raw)]
    assert status_batch(b"[]") == []


@pytest.mark.parametrize(
    "raw",
    [
        b'{"kind": "StatusChanged", "agent": "a", "status": "s"}',  # one event alone
        b'[{"kind": "Output", "agent": "a", "text": "t"}]',
        b'[{"kind": "StatusChanged", "agent": "", "status": "s"}]',
        b'[{"kind": "StatusChanged", "agent": "a", "status": ""}]',
        b'[{"kind": "StatusChanged", "agent": "a"}]',
        b'[{"kind": "StatusChanged", "agent": 7, "status": "s"}]',
        b'[{"kind": "StatusChanged", "agent": "a", "status": "s", "at": 1.5}]',
        b'[{"kind": "StatusChanged", "agent": "a", "status": "s", "extra": 1}]',
        b'[{"kind": "StatusChanged", "kind": "Output", "agent": "a", "status": "s"}]',
        b'[{"kind": "StatusChanged", "agent": "a\\u0000", "status": "s"}]',
        b'[{"kind": "StatusChanged", "agent": "\\ud800", "status": "s"}]',
        b'[{"kind": "StatusChanged", "agent": "a\\n", "status": "s"}]',
        b'[{"kind": "StatusChanged", "agent": "\xed\xa0\x80", "status": "s"}]',
        b'[{"kind": "StatusChanged", "agent": "a\x00", "status": "s"}]',
        b'[{"kind": "StatusChanged", "agent": "a\xff", "status": "s"}]',
        b'[{"kind": "StatusChanged", "agent": "a", "status": "s"},]',
        b'[{"kind": "StatusChanged", "agent": "a", "status": "s", "at": NaN}]',
        b'[{"kind": "StatusChanged", "agent": "a", "status": "s"}] trailing',
        b"[" * 10_000,
        b"",
        b"  ",
    ],
)
def test_anything_else_is_left_to_the_general_reader(raw: bytes) -> None:
    assert status_batch(raw) is None


_TEXT = st.text(st.characters(codec="utf-8"), max_size=6) | st.sampled_from(["", "a", " "])
_VALUE: st.SearchStrategy[Any] = st.none() | st.booleans() | st.integers() | st.floats() | _TEXT
_ITEM = st.fixed_dictionaries(
    {"kind": st.sampled_from(["StatusChanged", "Output"]) | _VALUE},
    optional={
        "agent": _VALUE,
        "status": _VALUE,
        "workspace": _VALUE,
        "at": _VALUE,
        "extra": _VALUE,
    },
)


@settings(max_examples=400, deadline=None)
@given(
    items=st.lists(_ITEM, max_size=5),
    ascii_only=st.booleans(),
    spaces=st.booleans(),
)
def test_where_the_shortcut_answers_the_general_reader_reads_the_same(
    items: list[dict[str, Any]], ascii_only: bool, spaces: bool
) -> None:
    separators = (", ", ": ") if spaces else (",", ":")
    raw = json.dumps(items, ensure_ascii=ascii_only, separators=separators).encode(
        "utf-8", "surrogatepass"
    )
    quick = status_batch(raw)
    if quick is not None:
        assert quick == general(raw)
        assert [type(e) for e in quick] == [StatusChanged] * len(items)
    elif b"\\" not in raw:
        assert not all(map(plain, items)), "a plain batch was left to the general reader"


def plain(item: dict[str, Any]) -> bool:
    def text(name: str) -> bool:
        return type(item.get(name)) is str and item[name] != ""

    return (
        item["kind"] == "StatusChanged"
        and text("agent")
        and text("status")
        and (item.get("workspace") is None or type(item["workspace"]) is str)
        and item.get("at") is None
        and "extra" not in item
    )


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=80))
def test_any_bytes_are_read_the_same_or_left_alone(tail: bytes) -> None:
    raw = b'[{"kind": "StatusChanged", "agent": "a", "status": "' + tail
    quick = status_batch(raw)
    if quick is not None:
        assert quick == general(raw)
