"""Preparing agent-controlled text for a platform: escape first, then chunk.

Escaping comes first because it lengthens text (``@everyone`` becomes ``@\u200beveryone``,
``&`` becomes ``&amp;``); chunking then splits at the provider's declared maximum, in the unit that
platform counts, and only where a reader sees a boundary: between grapheme clusters (never inside
an emoji sequence, a flag or a letter with its accents, let alone a surrogate pair or a UTF-8
sequence), never inside an escape or a platform token such as ``<@U123>`` or ``&amp;``. A cut
inside a fenced code block closes the fence at the end of the part and reopens it, with its info
string, at the start of the next, so every part renders as code where the whole did (ADR 0065).
"""

from __future__ import annotations

import bisect
import itertools
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import regex

from bridge_core.provider import LengthUnit

__all__ = [
    "ATOMIC_TOKENS",
    "REPLACEMENT",
    "InvalidText",
    "chunk",
    "find_invalid_text",
    "json_may_hold_invalid_text",
    "measure",
    "neutralise_mass_mentions",
    "prepare",
    "text_problem",
    "valid_json",
    "valid_text",
]

ZWSP = "\u200b"

# HTML entities and angle-bracket platform tokens (Slack <@U1>, <#C1|name>, Discord <@123>).
ATOMIC_TOKENS = re.compile(r"&#?\w{1,10};|<[^<>\s]{1,200}>")

_MASS = re.compile(r"@(everyone|here|channel)\b", re.IGNORECASE)

# An extended grapheme cluster (Unicode UAX #29): what a reader sees as one character.
_GRAPHEME = regex.compile(r"\X", regex.DOTALL)

# A CommonMark code fence line: up to three spaces, three or more backticks or tildes, an info
# string (a backtick fence's may not contain backticks).
_FENCE_LINE = re.compile(r"^ {0,3}(`{3,}|~{3,})([^\n]*)$", re.MULTILINE)

# JSON escapes of the characters json.dumps does not write as themselves.
_JSON_SHORT = frozenset('"\\\b\f\n\r\t')


def neutralise_mass_mentions(text: str) -> str:
    """Break ``@everyone``, ``@here`` and ``@channel`` with a zero-width space."""
    return _MASS.sub(lambda m: "@" + ZWSP + m.group(1), text)


def measure(text: str, unit: LengthUnit) -> int:
    """The length of ``text`` as a platform counting ``unit`` sees it."""
    if unit is LengthUnit.CHARACTERS:
        return len(text)
    if unit is LengthUnit.UTF16:
        return len(text.encode("utf-16-le")) // 2
    if unit is LengthUnit.JSON_ASCII:
        return len(json.dumps(text)) - 2
    if unit is LengthUnit.JSON_UTF8:
        return len(json.dumps(text, ensure_ascii=False).encode("utf-8")) - 2
    return len(text.encode("utf-8"))


def _cost(text: str, unit: LengthUnit) -> int:
    """``measure``, but a lone surrogate counts as the platform's encoder would write it escaped
    (3 bytes, 1 UTF-16 unit) instead of failing: ``chunk`` cuts any text it is given."""
    if unit is LengthUnit.CHARACTERS:
        return len(text)
    if unit is LengthUnit.UTF16:
        return len(text.encode("utf-16-le", "surrogatepass")) // 2
    if unit is LengthUnit.JSON_ASCII:
        return len(json.dumps(text)) - 2
    if unit is LengthUnit.JSON_UTF8:
        return len(json.dumps(text, ensure_ascii=False).encode("utf-8", "surrogatepass")) - 2
    return len(text.encode("utf-8", "surrogatepass"))


# The most one character costs in each unit: an astral character is 2 UTF-16 units, 4 bytes, 12
# as a JSON pair of \u escapes; a control character is 6 in JSON (\u001b).
_MOST_A_CHARACTER = {
    LengthUnit.CHARACTERS: 1,
    LengthUnit.UTF16: 2,
    LengthUnit.BYTES: 4,
    LengthUnit.JSON_ASCII: 12,
    LengthUnit.JSON_UTF8: 6,
}


@dataclass(frozen=True, slots=True)
class _Fence:
    """A fenced code block: its body runs from ``body_start`` to ``end`` (the closing line's
    start, or the text's end when the agent left it open)."""

    opener_start: int
    body_start: int
    end: int
    opener: str  # the opening line as written, e.g. "```python"
    closer: str  # the fence characters that close it, e.g. "```"

    def holds(self, position: int) -> bool:
        """Whether a cut at ``position`` leaves a part ending (or beginning) inside the block."""
        return self.body_start <= position <= self.end


def _fences(text: str) -> list[_Fence]:
    if "```" not in text and "~~~" not in text:
        return []
    fences: list[_Fence] = []
    opening: re.Match[str] | None = None
    for line in _FENCE_LINE.finditer(text):
        marks, info = line.group(1), line.group(2)
        if opening is None:
            if marks[0] == "`" and "`" in info:
                continue  # inline code such as ```a``` is no fence
            opening = line
            continue
        opened = opening.group(1)
        if marks[0] == opened[0] and len(marks) >= len(opened) and not info.strip():
            fences.append(_fence(opening, line.start()))
            opening = None
    if opening is not None:
        fences.append(_fence(opening, len(text)))
    return fences


def _fence(opening: re.Match[str], end: int) -> _Fence:
    return _Fence(
        opener_start=opening.start(),
        body_start=min(opening.end() + 1, end),
        end=end,
        opener=opening.group(0).lstrip(" "),
        closer=opening.group(1),
    )


# A cluster surely ends between two characters judged from them alone (UAX #29) when the first
# is a control or a line feed (GB4), or when the first is a plain character (GCB=Other: no rule
# joins anything to it from the left) and the second joins nothing to the cluster before it (GB9,
# GB9a). The cutter segments only from such a place, never from the start of the whole text.
# So does a cluster before a printable ASCII character unless a prefix (GB9b), a joiner (GB11),
# a flag's first half (GB12, GB13), a Hangul syllable (GB6-8) or a carriage return (GB3) ends it.
_SURE_END = regex.compile(
    r"(?<=[\p{GCB=Control}\p{GCB=LF}])"
    r"|(?<=\p{GCB=Other})(?![\p{GCB=Extend}\p{GCB=ZWJ}\p{GCB=SpacingMark}])"
    r"|(?<=[\p{GCB=Extend}\p{GCB=SpacingMark}])(?=[\x20-\x7e])"
)
_SURE_END_BEFORE = regex.compile(_SURE_END.pattern, regex.REVERSE)
_LOOK_BACK = 256  # characters searched for such a place before segmenting from the part's start
# Runs of regional indicators pair up from the run's start, so a place an even number of them
# into a run is a cluster's end. The regex module segments such a run in quadratic time (it
# counts back to the run's start at each one): 16,000 of them took 1.3 s, so the cutter never
# segments far into a run.
_FLAG_RUN = regex.compile(r"\p{GCB=Regional_Indicator}{3,}")


class _Cutter:
    """Where ``text`` may be cut, and what each span costs in ``unit``.

    Nothing is computed a character at a time in Python over the whole text: that took 0.4 to
    1.3 s for a text of a million characters, all of it holding the event loop. A part's reach is
    found by measuring slices, and grapheme clusters are segmented only around each cut, from a
    place where a cluster surely ends (``_SURE_END``), so a cut costs about its part's length in
    C and a few hundred characters in Python (ADR 0184)."""

    def __init__(self, text: str, unit: LengthUnit, atomic: re.Pattern[str]) -> None:
        self.text = text
        self.unit = unit
        self.fences = _fences(text)
        self.fence_starts = [fence.body_start for fence in self.fences]  # ascending: they nest not
        spans = [(m.start() + 1, m.end()) for m in atomic.finditer(text) if m.end() > m.start() + 1]
        # Never inside an opening line, nor right after it (a part of nothing but "```py").
        spans += [(fence.opener_start + 1, fence.body_start + 1) for fence in self.fences]
        spans.sort()
        # the forbidden positions as disjoint [start, end) runs, merged where they overlap
        self._forbidden_starts: list[int] = []
        self._forbidden_ends: list[int] = []
        for low, high in spans:
            if self._forbidden_ends and low <= self._forbidden_ends[-1]:
                self._forbidden_ends[-1] = max(self._forbidden_ends[-1], high)
            else:
                self._forbidden_starts.append(low)
                self._forbidden_ends.append(high)
        self._flag_runs: list[tuple[int, int]] = [
            (int(m.start()), int(m.end())) for m in _FLAG_RUN.finditer(text)
        ]
        self._long_cluster_end = -1  # the end of the last cluster a part was cut inside of

    def cost(self, start: int, end: int) -> int:
        return _cost(self.text[start:end], self.unit)

    def fence_at(self, position: int) -> _Fence | None:
        # Fences follow one another, so only the last to open at or before ``position`` can hold
        # it: a bisection, not a scan (a text of many fences is cut into many pieces).
        if 0 < position < len(self.text):
            index = bisect.bisect_right(self.fence_starts, position) - 1
            if index >= 0 and self.fences[index].holds(position):
                return self.fences[index]
        return None

    def cut(self, start: int, budget: int) -> int:
        """The best end for a part starting at ``start`` costing at most ``budget``."""
        end = self._reach(start, budget)
        if end >= len(self.text):
            return len(self.text)
        if end <= start:
            char = self.text[start]
            raise ValueError(
                f"a part of at most {budget} {self.unit.value} cannot hold the character "
                f"U+{ord(char):04X} at position {start}: raise max_length"
            )
        base = start  # where clusters are segmented from: a cluster's end
        if start < self._long_cluster_end:
            # The last part was cut inside a cluster too long for any part: cut it again if it
            # fills this part too, else segment from its end (from here, the rest of it would
            # look like clusters of its own).
            if self._long_cluster_end > end:
                return end
            base = self._long_cluster_end
        cut = self._last_end(base, end, allowed_only=True)
        if cut is None and base > start and not self._forbidden(base):
            cut = base
        if cut is None:
            # A token or a grapheme cluster longer than a whole part: cut it rather than loop.
            inside = self._last_end(base, end, allowed_only=False)
            if inside is not None or base > start:
                return inside or base
            # No cluster ends in the part: the one starting at ``base`` is longer than it.
            cluster = _GRAPHEME.match(self.text, base)
            self._long_cluster_end = base + (len(cluster.group()) if cluster else 0)
            return end
        soft_floor = start + max(1, (cut - start) * 4 // 5)
        for separator in ("\n", " "):
            position = self.text.rfind(separator, soft_floor, cut)
            if position != -1 and self._allowed(base, position + 1):
                return position + 1
        return cut

    def _reach(self, start: int, budget: int) -> int:
        """The furthest end whose span from ``start`` costs at most ``budget``."""
        high = min(len(self.text), start + budget)  # no character costs less than 1
        if self.unit is LengthUnit.CHARACTERS or self.cost(start, high) <= budget:
            return high
        # cost(start, low) <= budget < cost(start, high); a span's cost is the sum of its
        # characters', so each step measures only the half it adds
        low = start + budget // _MOST_A_CHARACTER[self.unit]
        spent = self.cost(start, low)
        while high - low > 1:
            middle = (low + high) // 2
            more = self.cost(low, middle)
            if spent + more <= budget:
                low, spent = middle, spent + more
            else:
                high = middle
        return low

    def _forbidden(self, position: int) -> bool:
        index = bisect.bisect_right(self._forbidden_starts, position) - 1
        return index >= 0 and position < self._forbidden_ends[index]

    def _allowed(self, start: int, position: int) -> bool:
        if self._forbidden(position):
            return False
        if position >= len(self.text) or _SURE_END.match(self.text, position):
            return True
        low = self._segment_from(start, position)
        return position in self._ends(low, position)

    def _last_end(self, start: int, end: int, *, allowed_only: bool) -> int | None:
        """The last cluster end in ``(start, end]`` (that is not forbidden, if ``allowed_only``)."""
        high = end
        while high > start:
            low = self._segment_from(start, high)
            for position in reversed(self._ends(low, high)):
                if not (allowed_only and self._forbidden(position)):
                    return position
            if low <= start:
                return None
            if not (allowed_only and self._forbidden(low)):
                return low
            high = low - 1
        return None

    def _segment_from(self, start: int, position: int) -> int:
        """A place at or before ``position`` where a cluster surely ends: near it if one is,
        else ``start`` (a part starts at a cluster's end, or where a cluster too long for any
        part was cut)."""
        run = bisect.bisect_right(self._flag_runs, (position, len(self.text))) - 1
        if run >= 0 and position < self._flag_runs[run][1]:
            run_start = self._flag_runs[run][0]
            paired = run_start + (position - run_start) // 2 * 2
            if paired > run_start:
                return max(paired, start)
        # up to one character past ``position``: the test looks at the character after a place
        # (a match at the very end of the searched text saw nothing after it, so it is no proof)
        low = max(start, position - _LOOK_BACK)
        for found in _SURE_END_BEFORE.finditer(self.text[low : position + 1]):
            place = low + int(found.start())
            if place <= position:
                return place
        return start

    def _ends(self, low: int, high: int) -> list[int]:
        """The ends of the clusters from ``low`` (a cluster's end) up to ``high``, ascending.
        Segmented up to one character past ``high``: whether a cluster ends at a place depends
        on the character after it, and on nothing further on."""
        # A slice, not ``pos``: from ``pos`` the regex module looks behind it for a run of
        # regional indicators, back to the run's start, and a text of flags cut quadratically.
        clusters = _GRAPHEME.findall(self.text[low : high + 1])
        return [
            end
            for end in itertools.accumulate(map(len, clusters), initial=low)
            if low < end <= high
        ]


def chunk(
    text: str,
    max_length: int,
    *,
    unit: LengthUnit = LengthUnit.CHARACTERS,
    atomic: re.Pattern[str] = ATOMIC_TOKENS,
) -> list[str]:
    """Split ``text`` into pieces of at most ``max_length`` units.

    Cuts only between grapheme clusters and outside ``atomic`` tokens, preferring a newline, then
    a space, within the last fifth of a piece; a token or cluster longer than a whole piece is cut
    (it cannot fit anywhere). A cut inside a fenced code block closes the fence at the end of the
    piece and reopens it at the start of the next (when the fence lines take at most a quarter of
    ``max_length``). An empty text is one empty piece. Raises ``ValueError`` when ``max_length``
    cannot hold a single character of the text.
    """
    if max_length < 1:
        raise ValueError(f"max_length must be at least 1, got {max_length}")
    if measure(text, unit) <= max_length:
        return [text]
    cutter = _Cutter(text, unit, atomic)
    # Fence lines must leave room for text: in tiny parts (a test's) the cuts stay plain.
    repair = bool(cutter.fences) and all(
        measure(f"{fence.opener}\n\n{fence.closer}", unit) <= max_length // 4
        for fence in cutter.fences
    )
    longest_close = max((measure(f"\n{f.closer}", unit) for f in cutter.fences), default=0)
    pieces: list[str] = []
    start = 0
    n = len(text)
    while start < n:
        reopened = cutter.fence_at(start) if repair else None
        prefix = f"{reopened.opener}\n" if reopened is not None else ""
        budget = max_length - measure(prefix, unit)
        cut = cutter.cut(start, budget)
        suffix = _closing(cutter, cut) if repair else ""
        if suffix and cutter.cost(start, cut) + measure(suffix, unit) > budget:
            cut = cutter.cut(start, budget - longest_close)
            suffix = _closing(cutter, cut)
        pieces.append(prefix + text[start:cut] + suffix)
        start = cut
    return pieces


def _closing(cutter: _Cutter, cut: int) -> str:
    fence = cutter.fence_at(cut)
    if fence is None:
        return ""
    return fence.closer if cutter.text[cut - 1] == "\n" else f"\n{fence.closer}"


def prepare(
    text: str,
    *,
    escape: Callable[[str], str],
    max_length: int,
    unit: LengthUnit = LengthUnit.CHARACTERS,
) -> list[str]:
    """Escape agent text for a platform, then chunk it at the platform's maximum."""
    return chunk(escape(text), max_length, unit=unit)


# --------------------------------------------------------------------------- valid text at the
# boundaries (ADR 0070). Text from a client, a platform, a file or an agent may hold code points
# nothing downstream can carry: a lone surrogate (JSON's "\ud800" escape, an undecodable byte
# that Python kept with ``surrogateescape``) cannot be encoded to UTF-8 at all, and NUL cannot be
# stored in a PostgreSQL text column. Each boundary either refuses such text, naming the field
# (``find_invalid_text``), or makes it valid (``valid_text``, ``valid_json``).

REPLACEMENT = "\ufffd"


@dataclass(frozen=True, slots=True)
class InvalidText:
    """Where, in a JSON value, the first string nothing downstream can carry is, and why."""

    path: tuple[str | int, ...]  # keys and list indices from the top; () for the value itself
    reason: str

    @property
    def field(self) -> str:
        """The path as ``channels.ops.0.text`` (``value`` for the top-level value)."""
        return ".".join(str(part) for part in self.path) or "value"


def _carried(value: str) -> bool:
    if value.isascii():
        return "\0" not in value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\0" not in value


def text_problem(value: str) -> str | None:
    """Why ``value`` cannot be carried as text (a lone surrogate, a NUL), or ``None``."""
    if _carried(value):
        return None
    for position, char in enumerate(value):
        if char == "\0":
            return (
                f"contains NUL (U+0000) at character {position}, which chat text cannot carry "
                "(nor a PostgreSQL ledger store); remove it"
            )
        if "\ud800" <= char <= "\udfff":
            return (
                f"contains a lone surrogate (U+{ord(char):04X}) at character {position}, which is "
                "not Unicode text; send UTF-8, and pair every \\uD8xx-\\uDBxx escape with a "
                "\\uDCxx-\\uDFxx one"
            )
    return None  # pragma: no cover - _carried said otherwise


def valid_text(value: str) -> str:
    """``value`` with every lone surrogate and NUL replaced by U+FFFD; a surrogate pair written
    as two code points becomes the one character it encodes. Valid text is returned as it is."""
    if _carried(value):
        return value
    joined = value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return joined.replace("\0", REPLACEMENT)


# A path as a linked list (parent, key): a copied tuple per level would make a value nested n deep
# cost n squared to walk.
_Link = tuple[Any, str | int] | None


def find_invalid_text(value: Any) -> InvalidText | None:
    """The first string (a value or a key, at any depth) of a JSON value that ``valid_text``
    would change, or ``None``. Walks without recursion, so any depth is safe."""
    stack: list[tuple[_Link, Any]] = [(None, value)]

    def found(link: _Link, reason: str) -> InvalidText:
        parts: list[str | int] = []
        while link is not None:
            link, key = link
            parts.append(key)
        return InvalidText(tuple(reversed(parts)), reason)

    while stack:
        link, item = stack.pop()
        if isinstance(item, str):
            problem = text_problem(item)
            if problem is not None:
                return found(link, problem)
        elif isinstance(item, Mapping):
            children: list[tuple[_Link, Any]] = []
            for key, child in item.items():
                name = str(key)
                problem = text_problem(name)
                if problem is not None:
                    return found((link, valid_text(name)), f"the key {problem}")
                children.append(((link, name), child))
            stack.extend(reversed(children))
        elif isinstance(item, (list, tuple)):
            stack.extend(((link, i), child) for i, child in reversed(list(enumerate(item))))
    return None


def json_may_hold_invalid_text(raw: bytes) -> bool:
    """Whether JSON read from ``raw`` (decoded as strict UTF-8, parsed by ``json``) can hold a
    string ``find_invalid_text`` refuses. Only a ``\\u`` escape can put a lone surrogate or a
    NUL there: strict UTF-8 refuses encoded surrogates and ``json`` refuses raw control
    characters in strings. So when this is False, the walk of every string can be skipped."""
    # A backslash is looked for first: a one-byte search is memchr, while CPython 3.11 searches
    # for two bytes one byte at a time (a fifth of json.loads' own time on a batch of events).
    return b"\\" in raw and b"\\u" in raw


def valid_json(value: Any) -> Any:
    """A copy of a JSON value with ``valid_text`` applied to every string, keys included.
    Walks without recursion, so any depth is safe."""
    if find_invalid_text(value) is None:
        return value
    root: list[Any] = [None]
    # (container to fill, key or index in it, value to copy into it)
    work: list[tuple[Any, Any, Any]] = [(root, 0, value)]
    while work:
        target, slot, item = work.pop()
        if isinstance(item, str):
            target[slot] = valid_text(item)
        elif isinstance(item, dict):
            copy: dict[Any, Any] = {}
            target[slot] = copy
            for key, child in item.items():
                new_key = valid_text(key) if isinstance(key, str) else key
                copy[new_key] = None
                work.append((copy, new_key, child))
        elif isinstance(item, (list, tuple)):
            items: list[Any] = [None] * len(item)
            target[slot] = items
            work.extend((items, i, child) for i, child in enumerate(item))
        else:
            target[slot] = item
    return root[0]
