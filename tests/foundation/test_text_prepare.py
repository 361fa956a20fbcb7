"""Escaping then chunking, with multi-byte text, in each LengthUnit."""

from __future__ import annotations

import html
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge_core.provider import LengthUnit
from bridge_core.text import (
    ATOMIC_TOKENS,
    _Cutter,
    chunk,
    measure,
    neutralise_mass_mentions,
    prepare,
)

UNITS = list(LengthUnit)


def slack_like_escape(text: str) -> str:
    """Escape like Slack's mrkdwn (&, <, >) and break mass mentions."""
    return neutralise_mass_mentions(html.escape(text, quote=False))


def cut_positions(pieces: list[str]) -> list[int]:
    positions, at = [], 0
    for piece in pieces[:-1]:
        at += len(piece)
        positions.append(at)
    return positions


def assert_no_cut_inside_a_token(
    text: str, pieces: list[str], max_length: int, unit: LengthUnit
) -> None:
    for match in ATOMIC_TOKENS.finditer(text):
        if measure(match.group(), unit) > max_length:
            continue  # a token longer than a whole piece cannot be kept whole
        for cut in cut_positions(pieces):
            assert not (match.start() < cut < match.end()), (match.group(), cut, pieces)


@pytest.mark.parametrize(
    ("text", "unit", "expected"),
    [
        ("😀", LengthUnit.CHARACTERS, 1),
        ("😀", LengthUnit.UTF16, 2),
        ("😀", LengthUnit.BYTES, 4),
        ("中文", LengthUnit.CHARACTERS, 2),
        ("中文", LengthUnit.UTF16, 2),
        ("中文", LengthUnit.BYTES, 6),
        ("é", LengthUnit.BYTES, 2),
        ("👩‍💻", LengthUnit.CHARACTERS, 3),  # a ZWJ sequence is three code points
        ("👩‍💻", LengthUnit.UTF16, 5),
    ],
)
def test_measure_counts_what_the_platform_counts(
    text: str, unit: LengthUnit, expected: int
) -> None:
    assert measure(text, unit) == expected


def test_never_split_inside_a_character() -> None:
    assert chunk("中中", 4, unit=LengthUnit.BYTES) == ["中", "中"]
    assert chunk("😀😀😀", 3, unit=LengthUnit.UTF16) == ["😀", "😀", "😀"]
    assert chunk("😀😀", 7, unit=LengthUnit.BYTES) == ["😀", "😀"]
    assert chunk("ab😀", 3, unit=LengthUnit.UTF16) == ["ab", "😀"]


def test_escaping_happens_before_chunking_so_escapes_are_never_cut() -> None:
    text = "a&b <@U1> & @everyone"
    pieces = prepare(text, escape=slack_like_escape, max_length=6, unit=LengthUnit.CHARACTERS)
    escaped = slack_like_escape(text)
    assert "".join(pieces) == escaped
    assert all(measure(p, LengthUnit.CHARACTERS) <= 6 for p in pieces)
    assert_no_cut_inside_a_token(escaped, pieces, 6, LengthUnit.CHARACTERS)
    assert "&amp;" in escaped and "@\u200beveryone" in escaped
    assert not any(p.endswith("&") or p.endswith("&am") for p in pieces)


@pytest.mark.parametrize("unit", UNITS, ids=lambda u: u.value)
def test_a_user_token_stays_whole_at_a_boundary(unit: LengthUnit) -> None:
    text = "x" * 8 + "<@U123>" + "y" * 8
    pieces = chunk(text, 10, unit=unit)
    assert any("<@U123>" in piece for piece in pieces)
    assert "".join(pieces) == text


def test_prefers_newlines_then_spaces() -> None:
    # Within the last fifth of a piece, a newline wins over a later space.
    assert chunk("a" * 11 + "\nb cccccc", 14) == ["a" * 11 + "\n", "b cccccc"]
    assert chunk("a" * 12 + " " + "b" * 9, 14) == ["a" * 12 + " ", "b" * 9]
    assert chunk("a" * 30, 14) == ["a" * 14, "a" * 14, "aa"]
    assert chunk("", 5) == [""]
    with pytest.raises(ValueError, match="max_length must be at least 1"):
        chunk("x", 0)


TEXT = st.lists(
    st.sampled_from(
        [
            "a",
            "b",
            " ",
            "\n",
            "é",
            "中",
            "😀",
            "👩‍💻",
            "&",
            "<",
            ">",
            "<@U1>",
            "<#C9|ops>",
            "@here",
            "&amp;",
        ]
    ),
    max_size=120,
).map("".join)


@settings(max_examples=200, deadline=None)
@given(text=TEXT, max_length=st.integers(min_value=12, max_value=60), unit=st.sampled_from(UNITS))
def test_prepared_pieces_fit_rejoin_and_keep_tokens_whole(
    text: str, max_length: int, unit: LengthUnit
) -> None:
    pieces = prepare(text, escape=slack_like_escape, max_length=max_length, unit=unit)
    escaped = slack_like_escape(text)
    assert "".join(pieces) == escaped
    assert all(measure(piece, unit) <= max_length for piece in pieces)
    assert all(piece for piece in pieces) or escaped == ""
    assert_no_cut_inside_a_token(escaped, pieces, max_length, unit)
    # Escaped text never carries a live mass mention, even across pieces.
    assert re.search(r"@(here|everyone|channel)\b", escaped) is None


FENCED = st.lists(
    st.sampled_from(["```\n", "```py\n", "~~~\n", "````\n", "code\n", "text ", "\n", "x"]),
    max_size=60,
).map("".join)


@given(text=FENCED)
def test_the_fence_at_a_position_is_the_one_that_holds_it(text: str) -> None:
    # the bisection against the plain scan it replaced
    cutter = _Cutter(text, LengthUnit.CHARACTERS, ATOMIC_TOKENS)
    for position in range(len(text) + 1):
        inside = 0 < position < len(text)
        scanned = next((f for f in cutter.fences if inside and f.holds(position)), None)
        assert cutter.fence_at(position) is scanned
