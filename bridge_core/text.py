"""Preparing agent-controlled text for a platform: escape first, then chunk.

Escaping comes first because it lengthens text (``@everyone`` becomes ``@\u200beveryone``,
``&`` becomes ``&amp;``); chunking then splits at the provider's declared maximum, in the unit that
platform counts, never inside a character (a surrogate pair or a UTF-8 sequence) and never inside
an escape or a platform token such as ``<@U123>`` or ``&amp;``.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from bridge_core.provider import LengthUnit

__all__ = [
    "ATOMIC_TOKENS",
    "chunk",
    "measure",
    "neutralise_mass_mentions",
    "prepare",
]

ZWSP = "\u200b"

# HTML entities and angle-bracket platform tokens (Slack <@U1>, <#C1|name>, Discord <@123>).
ATOMIC_TOKENS = re.compile(r"&#?\w{1,10};|<[^<>\s]{1,200}>")

_MASS = re.compile(r"@(everyone|here|channel)\b", re.IGNORECASE)


def neutralise_mass_mentions(text: str) -> str:
    """Break ``@everyone``, ``@here`` and ``@channel`` with a zero-width space."""
    return _MASS.sub(lambda m: "@" + ZWSP + m.group(1), text)


def measure(text: str, unit: LengthUnit) -> int:
    """The length of ``text`` as a platform counting ``unit`` sees it."""
    if unit is LengthUnit.CHARACTERS:
        return len(text)
    if unit is LengthUnit.UTF16:
        return len(text.encode("utf-16-le")) // 2
    return len(text.encode("utf-8"))


def _char_cost(ch: str, unit: LengthUnit) -> int:
    if unit is LengthUnit.CHARACTERS:
        return 1
    code = ord(ch)
    if unit is LengthUnit.UTF16:
        return 2 if code > 0xFFFF else 1
    if code < 0x80:
        return 1
    if code < 0x800:
        return 2
    if code < 0x10000:
        return 3
    return 4


def chunk(
    text: str,
    max_length: int,
    *,
    unit: LengthUnit = LengthUnit.CHARACTERS,
    atomic: re.Pattern[str] = ATOMIC_TOKENS,
) -> list[str]:
    """Split ``text`` into pieces of at most ``max_length`` units.

    Prefers to break after a newline, then after a space, within the last fifth of a piece; never
    inside a character or an ``atomic`` token. An empty text is one empty piece.
    """
    if max_length < 1:
        raise ValueError(f"max_length must be at least 1, got {max_length}")
    if measure(text, unit) <= max_length:
        return [text]
    # Positions where a cut is allowed: not inside an atomic token.
    forbidden: set[int] = set()
    for match in atomic.finditer(text):
        if match.end() - match.start() > 1:
            forbidden.update(range(match.start() + 1, match.end()))
    pieces: list[str] = []
    start = 0
    n = len(text)
    while start < n:
        used = 0
        end = start
        while end < n:
            cost = _char_cost(text[end], unit)
            if used + cost > max_length:
                break
            used += cost
            end += 1
        if end >= n:
            pieces.append(text[start:])
            break
        cut = end
        while cut > start and cut in forbidden:
            cut -= 1
        if cut == start:
            # A token longer than a whole piece: cut it rather than loop forever.
            cut = end
        soft_floor = start + max(1, (cut - start) * 4 // 5)
        for sep in ("\n", " "):
            pos = text.rfind(sep, soft_floor, cut)
            if pos != -1 and (pos + 1) not in forbidden:
                cut = pos + 1
                break
        pieces.append(text[start:cut])
        start = cut
    return pieces


def prepare(
    text: str,
    *,
    escape: Callable[[str], str],
    max_length: int,
    unit: LengthUnit = LengthUnit.CHARACTERS,
) -> list[str]:
    """Escape agent text for a platform, then chunk it at the platform's maximum."""
    return chunk(escape(text), max_length, unit=unit)
