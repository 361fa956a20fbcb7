"""``bridge_core.text``'s valid-text functions (ADR 0070), over full Unicode: lone surrogates,
NUL, control characters, and JSON nested deeper than any recursion could walk."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from bridge_core.text import (
    REPLACEMENT,
    find_invalid_text,
    json_may_hold_invalid_text,
    text_problem,
    valid_json,
    valid_text,
)

# Every code point, surrogates included (hypothesis leaves them out by default).
ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=40)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | ANY_TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(ANY_TEXT, inner, max_size=4),
    max_leaves=20,
)


def _carried(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\0" not in value


@given(ANY_TEXT)
def test_valid_text_is_always_carried_and_changes_only_what_must(value: str) -> None:
    made = valid_text(value)
    assert _carried(made)
    assert valid_text(made) == made
    assert (text_problem(value) is None) == _carried(value)
    if _carried(value):
        assert made is value


def test_each_class_of_bad_code_point() -> None:
    assert valid_text("a\ud800b") == f"a{REPLACEMENT}b"
    assert valid_text("\udfff") == REPLACEMENT
    assert valid_text("\udc00\ud800") == REPLACEMENT * 2
    assert valid_text("a\0b") == f"a{REPLACEMENT}b"
    assert valid_text("\ud83d\ude00") == "😀"  # a pair written as two code points is one char
    assert valid_text("bell\a esc\x1b c1\x9b \ufffe") == "bell\a esc\x1b c1\x9b \ufffe"
    assert "U+D800" in (text_problem("x\ud800") or "")
    assert "NUL" in (text_problem("x\0") or "")


@given(JSON)
def test_find_invalid_text_agrees_with_valid_json(value: Any) -> None:
    made = valid_json(value)
    assert find_invalid_text(made) is None
    invalid = find_invalid_text(value)
    if invalid is None:
        assert made is value
    else:
        assert invalid.reason


def test_paths_name_the_first_bad_string() -> None:
    found = find_invalid_text({"a": [1, "ok", {"b": "x\0"}], "c": "\ud800"})
    assert found is not None
    assert found.path == ("a", 2, "b")
    assert found.field == "a.2.b"
    key = find_invalid_text({"k\ud800": 1})
    assert key is not None and key.path == (f"k{REPLACEMENT}",) and "key" in key.reason
    top = find_invalid_text("\0")
    assert top is not None and top.field == "value"


def test_any_depth_is_walked_without_recursion() -> None:
    deep: Any = "x\ud800"
    for _ in range(200_000):
        deep = [deep]
    found = find_invalid_text(deep)
    assert found is not None and len(found.path) == 200_000
    made = valid_json(deep)
    for _ in range(200_000):
        made = made[0]
    assert made == f"x{REPLACEMENT}"


@settings(deadline=None)  # what it checks is agreement, not time (a loaded host is slow)
@given(JSON, st.booleans())
def test_json_without_a_u_escape_holds_no_invalid_text(value: Any, ascii_only: bool) -> None:
    # The HTTP API skips the walk of a body's strings when this says so: it must never be
    # wrong in that direction, whatever bytes a client sends.
    raw = json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    try:
        parsed = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return  # refused before any string is looked at (not UTF-8, or not JSON)
    if not json_may_hold_invalid_text(raw):
        assert find_invalid_text(parsed) is None
    if find_invalid_text(parsed) is not None:
        assert json_may_hold_invalid_text(raw)


def test_raw_bytes_no_escape_could_hide() -> None:
    # A NUL or an encoded surrogate written as raw bytes never reaches a string.
    for raw in (b'{"a": "x\x00y"}', b'{"a": "\xed\xa0\x80"}', b'{"\x00": 1}'):
        assert not json_may_hold_invalid_text(raw)
        try:
            json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            continue
        raise AssertionError(f"{raw!r} was read")
    assert json_may_hold_invalid_text(b'{"a": "\\u0000"}')
    assert json_may_hold_invalid_text(b'["\\ud800"]')
