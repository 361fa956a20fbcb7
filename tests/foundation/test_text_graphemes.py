"""Chunks are cut where a reader sees a boundary, and code fences stay balanced across parts."""

from __future__ import annotations

import regex
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge_core.provider import LengthUnit
from bridge_core.testing.http_fuzz import ANY_TEXT
from bridge_core.text import _FENCE_LINE, chunk, measure

UNITS = list(LengthUnit)
CLUSTERS = [
    "👩‍💻",  # a ZWJ sequence: woman, ZWJ, laptop
    "👨‍👩‍👧‍👦",  # a family: seven code points
    "🇫🇷",  # a flag: two regional indicators
    "e\u0301",  # e and a combining acute accent
    "👍🏽",  # an emoji and a skin-tone modifier
    "क्षि",  # Devanagari conjunct
    "\r\n",
]


def boundaries(text: str) -> set[int]:
    return {m.end() for m in regex.finditer(r"\X", text)} | {0}


def cuts(pieces: list[str]) -> list[int]:
    at, positions = 0, []
    for piece in pieces[:-1]:
        at += len(piece)
        positions.append(at)
    return positions


def test_a_zwj_sequence_a_flag_and_an_accent_are_never_split() -> None:
    assert chunk("👨‍👩‍👧‍👦" * 3, 12, unit=LengthUnit.UTF16) == ["👨‍👩‍👧‍👦"] * 3
    assert chunk("🇫🇷🇩🇪🇬🇧", 5) == ["🇫🇷🇩🇪", "🇬🇧"]
    assert chunk("e\u0301" * 4, 3) == ["e\u0301"] * 4
    assert chunk("ab👍🏽", 4, unit=LengthUnit.UTF16) == ["ab", "👍🏽"]


def test_a_cluster_longer_than_a_part_is_cut_rather_than_looping() -> None:
    zalgo = "a" + "\u0301" * 30
    pieces = chunk(zalgo, 10)
    assert "".join(pieces) == zalgo
    assert all(len(p) <= 10 for p in pieces)


def test_a_part_too_small_for_one_character_is_an_error_not_a_loop() -> None:
    try:
        chunk("😀😀", 3, unit=LengthUnit.BYTES)
    except ValueError as exc:
        assert "U+1F600" in str(exc)
    else:
        raise AssertionError("a 3-byte part cannot hold a 4-byte emoji")


def test_json_ascii_counts_what_json_sends() -> None:
    for text in ("\x1b", "é", "😀", '"', "\\", "\n", "a\x7f", "\udc80"):
        assert measure(text, LengthUnit.JSON_ASCII) == len(_json(text)), repr(text)
    pieces = chunk("\x1b" * 100, 60, unit=LengthUnit.JSON_ASCII)
    assert all(len(_json(p)) <= 60 for p in pieces)
    assert "".join(pieces) == "\x1b" * 100


def _json(text: str) -> str:
    import json

    return json.dumps(text)[1:-1]


def fence_lines(piece: str) -> int:
    return len(_FENCE_LINE.findall(piece))


def test_a_cut_inside_a_code_fence_closes_and_reopens_it() -> None:
    code = "".join(f"print({i})\n" for i in range(40))
    text = f"Here is the script:\n```python\n{code}```\nThat was it.\n"
    pieces = chunk(text, 120)
    assert len(pieces) >= 3
    for piece in pieces:
        assert len(piece) <= 120
        assert fence_lines(piece) % 2 == 0, f"unbalanced fence in {piece!r}"
    for piece in pieces[1:-1]:
        assert piece.startswith("```python\n") and piece.endswith("```"), piece
    # Taking the added fence lines away gives the text back.
    rebuilt = pieces[0][: -len("```")]
    for piece in pieces[1:]:
        body = piece.removeprefix("```python\n")
        rebuilt += body.removesuffix("```") if piece is not pieces[-1] else body
    assert rebuilt.replace("\n\n", "\n") == text.replace("\n\n", "\n")


def test_tildes_and_longer_fences_are_reopened_as_written() -> None:
    text = "~~~~ text\n" + "line of text\n" * 30 + "~~~~\n"
    pieces = chunk(text, 80)
    assert all(p.startswith("~~~~ text\n") for p in pieces)
    assert all(p.rstrip("\n").endswith("~~~~") for p in pieces)


def test_without_fences_nothing_is_added() -> None:
    text = "word " * 100 + "``inline`` and `code`"
    assert "".join(chunk(text, 37)) == text


# Text is made valid at every boundary before it is chunked (ADR 0070), and measure refuses a
# lone surrogate on purpose (the sender's render containment relies on it): every other code
# point, NUL and controls included, is fair game.
VALID_CHARACTERS = st.characters(exclude_categories=("Cs",))
VALID_TEXT = st.text(alphabet=VALID_CHARACTERS)

CLUSTERED = st.lists(
    st.one_of(st.sampled_from([*CLUSTERS, " ", "\n", "a", "<@U1>", "&amp;"]), VALID_CHARACTERS),
    max_size=150,
).map("".join)


@settings(max_examples=300, deadline=None)
@given(
    text=CLUSTERED, max_length=st.integers(min_value=12, max_value=80), unit=st.sampled_from(UNITS)
)
def test_every_cut_is_a_grapheme_boundary_and_every_part_fits(
    text: str, max_length: int, unit: LengthUnit
) -> None:
    pieces = chunk(text, max_length, unit=unit)
    assert "".join(pieces) == text  # no fences in this alphabet
    assert all(measure(p, unit) <= max_length for p in pieces)
    allowed = boundaries(text)
    for position in cuts(pieces):
        cluster = next(m for m in regex.finditer(r"\X", text) if m.end() >= position)
        if measure(cluster.group(), unit) <= max_length:
            assert position in allowed, (position, text, pieces)


@settings(max_examples=150, deadline=None)
@given(
    lines=st.lists(
        st.one_of(st.sampled_from(["```", "```py", "~~~", "code();", "😀 text", ""]), VALID_TEXT),
        max_size=60,
    ),
    max_length=st.integers(min_value=40, max_value=200),
    unit=st.sampled_from(UNITS),
)
def test_fenced_text_parts_fit_and_stay_balanced(
    lines: list[str], max_length: int, unit: LengthUnit
) -> None:
    text = "\n".join(lines)
    pieces = chunk(text, max_length, unit=unit)
    assert all(measure(p, unit) <= max_length for p in pieces)
    assert all(pieces) or text == ""


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet=VALID_CHARACTERS, max_size=40))
def test_chunk_costs_agree_with_measure_over_full_unicode(text: str) -> None:
    from bridge_core.text import _cost

    for unit in UNITS:
        assert _cost(text, unit) == measure(text, unit), (unit, text)


@settings(max_examples=300, deadline=None)
@given(text=ANY_TEXT)
def test_a_spans_cost_is_the_sum_of_its_characters(text: str) -> None:
    """The cutter finds a part's reach by measuring only the half it adds at each step, and
    starts from the least a part of ``budget`` can hold: both need a span's cost to be the sum of
    its characters' costs, each at most ``_MOST_A_CHARACTER`` (lone surrogates included)."""
    from bridge_core.text import _MOST_A_CHARACTER, _cost

    for unit in UNITS:
        costs = [_cost(ch, unit) for ch in text]
        assert sum(costs) == _cost(text, unit), (unit, text)
        assert all(1 <= cost <= _MOST_A_CHARACTER[unit] for cost in costs), (unit, text)
