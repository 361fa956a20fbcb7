"""Text that finds a provider's length and chunking mistakes (the conformance suite's).

Grapheme clusters a reader sees as one character, a fenced code block, and characters whose
size differs most between units and on the wire; and the check that no message boundary falls
inside a cluster.
"""

from __future__ import annotations

from collections.abc import Sequence

import regex

from bridge_core.provider import LengthUnit
from bridge_core.text import measure

__all__ = ["AWKWARD_CHARACTERS", "cut_positions", "long_text", "split_clusters"]


def long_text(minimum: int, unit: LengthUnit) -> str:
    # Grapheme clusters a reader sees as one character (a ZWJ sequence, a flag, a letter and its
    # combining accent, a skin tone), a fenced code block, and no space in the cluster run, so
    # cuts fall among them.
    line = (
        "lorem ipsum dolor sit amet, consectetur 😀 adipiscing élit & <tag> sed do\n"
        "👩‍💻👨‍👩‍👧‍👦🇫🇷🇩🇪e\u0301e\u0301👍🏽👍🏽👩‍💻🇬🇧e\u0301🇫🇷👨‍👩‍👧‍👦👍🏽\n"
        "```python\nprint('code')  # 😀\n```\n"
    )
    text = line
    while measure(text, unit) < minimum:
        text += line
    return text


# Single characters whose size differs most between units and on the wire (JSON escapes); five,
# so the test stays within a platform's burst (Discord's 5 per 5 s).
AWKWARD_CHARACTERS = ("é", "😀", "\x1b", '"', "中")


def cut_positions(pieces: Sequence[str]) -> list[int]:
    positions, at = [], 0
    for piece in pieces[:-1]:
        at += len(piece)
        positions.append(at)
    return positions


def split_clusters(pieces: Sequence[str]) -> list[str]:
    """The clusters a cut between ``pieces`` falls inside (their joined text's view)."""
    whole = "".join(pieces)
    bounds = {m.end() for m in regex.finditer(r"\X", whole)}
    return [whole[max(0, cut - 4) : cut + 4] for cut in cut_positions(pieces) if cut not in bounds]
