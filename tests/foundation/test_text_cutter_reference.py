"""The cutter segments grapheme clusters only around each cut (ADR 0184). Its parts are those of
the cutter it replaced, which segmented the whole text and priced every character in Python
(kept here as the reference), over full Unicode and over long runs of the characters that make
segmentation hard: flags, joiners, combining marks, Hangul jamo, Indic conjuncts."""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge_core import text as text_module
from bridge_core.provider import LengthUnit
from bridge_core.testing.http_fuzz import ANY_TEXT
from bridge_core.text import _GRAPHEME, _cost, _fences, chunk


class ReferenceCutter:
    """The whole-text cutter: every cluster's end and every character's cost, up front."""

    def __init__(self, text: str, unit: LengthUnit, atomic: re.Pattern[str]) -> None:
        self.text = text
        self.unit = unit
        self.fences = _fences(text)
        self.fence_starts = [fence.body_start for fence in self.fences]
        forbidden: set[int] = set()
        for match in atomic.finditer(text):
            forbidden.update(range(match.start() + 1, match.end()))
        for fence in self.fences:
            forbidden.update(range(fence.opener_start + 1, fence.body_start + 1))
        self.graphemes = [m.end() for m in _GRAPHEME.finditer(text)]
        self.allowed = [p for p in self.graphemes if p not in forbidden]
        self.allowed_set = frozenset(self.allowed)
        self.costs = [0, *itertools.accumulate(_cost(ch, unit) for ch in text)]

    def cost(self, start: int, end: int) -> int:
        return self.costs[end] - self.costs[start]

    def fence_at(self, position: int) -> object:
        if 0 < position < len(self.text):
            index = bisect.bisect_right(self.fence_starts, position) - 1
            if index >= 0 and self.fences[index].holds(position):
                return self.fences[index]
        return None

    def cut(self, start: int, budget: int) -> int:
        end = bisect.bisect_right(self.costs, self.costs[start] + budget, lo=start) - 1
        if end >= len(self.text):
            return len(self.text)
        if end <= start:
            raise ValueError("a part cannot hold one character")
        cut = last_at_most(self.allowed, start, end)
        if cut is None:
            return last_at_most(self.graphemes, start, end) or end
        soft_floor = start + max(1, (cut - start) * 4 // 5)
        for separator in ("\n", " "):
            position = self.text.rfind(separator, soft_floor, cut)
            if position != -1 and (position + 1) in self.allowed_set:
                return position + 1
        return cut


def last_at_most(positions: list[int], start: int, end: int) -> int | None:
    index = bisect.bisect_right(positions, end) - 1
    return positions[index] if index >= 0 and positions[index] > start else None


def reference_chunk(text: str, max_length: int, unit: LengthUnit) -> list[str] | type:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(text_module, "_Cutter", ReferenceCutter)
        return parts_or_error(text, max_length, unit)


def parts_or_error(text: str, max_length: int, unit: LengthUnit) -> list[str] | type:
    try:
        return chunk(text, max_length, unit=unit)
    except (ValueError, UnicodeError) as error:
        return type(error)


HARD = [
    "🇫", "🇷", "\u0301", "\u1100", "\u1161", "\u11a8", "가", "👩\u200d", "\u200d", "\u0915\u094d",
    "\u0903", "\u0600", "a", " ", "\n", "\r", "🦆", "<@U1>", "&amp;", "```py\n", "```\n", "\x00",
    "\ud800", '"', "\\", "日本",
]  # fmt: skip
RUNS = st.tuples(st.sampled_from(HARD), st.integers(1, 400)).map(lambda run: run[0] * run[1])
TEXTS = st.one_of(
    ANY_TEXT,
    st.lists(st.sampled_from(HARD), max_size=200).map("".join),
    st.lists(st.one_of(RUNS, ANY_TEXT), min_size=1, max_size=6).map("".join),
)


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(text=TEXTS, unit=st.sampled_from(list(LengthUnit)), max_length=st.integers(1, 1500))
def test_the_parts_are_the_whole_text_cutters(text: str, unit: LengthUnit, max_length: int) -> None:
    assert parts_or_error(text, max_length, unit) == reference_chunk(text, max_length, unit)


class CountingGraphemes:
    """``_GRAPHEME`` that counts the characters the cutter asks it to segment."""

    def __init__(self) -> None:
        self.segmented = 0

    def findall(self, text: str) -> list[str]:
        self.segmented += len(text)
        return list(_GRAPHEME.findall(text))

    def match(self, text: str, pos: int) -> object:
        return _GRAPHEME.match(text, pos)

    def finditer(self, text: str) -> Iterator[object]:
        return iter(_GRAPHEME.finditer(text))


@pytest.mark.parametrize(
    ("text", "unit", "max_length"),
    [
        ("🇫🇷" * 50_000, LengthUnit.CHARACTERS, 2000),  # the regex module's \X is quadratic here
        ("e\u0301" * 50_000, LengthUnit.BYTES, 4000),
        ("日本語のテキスト" * 12_500, LengthUnit.JSON_UTF8, 4000),
        ("word " * 20_000, LengthUnit.UTF16, 4000),
    ],
)
def test_only_the_neighbourhood_of_each_cut_is_segmented(
    text: str, unit: LengthUnit, max_length: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    counting = CountingGraphemes()
    monkeypatch.setattr(text_module, "_GRAPHEME", counting)
    parts = chunk(text, max_length, unit=unit)
    assert "".join(parts) == text
    # at most a part's length and a look-back per cut, far less than the text for most texts
    assert counting.segmented <= len(parts) * (max_length + 2 * text_module._LOOK_BACK)
    assert counting.segmented < len(text) // 4
