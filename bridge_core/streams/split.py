"""Cutting a growing text into a platform's parts without re-cutting what cannot change.

A stream's text is split every time its message is rendered; a long answer would be escaped
and chunked from its first character each time, a per-character loop. ``PartSplitter`` gives
exactly ``chunk(escape(clean(text)))`` (the runtime's ``split_reply``) but remembers the parts
before the last one: chunking is greedy from the start and never cuts inside a token, so while
the escaped text still begins with those parts (and runs on past them by more than any token's
length), only the rest is chunked again, a window at a time. A text with a code fence is cut
whole each time: the chunker closes and reopens fences across cuts, deciding it for the whole
text.
"""

from __future__ import annotations

from collections.abc import Callable

from bridge_core.provider import LengthUnit
from bridge_core.text import chunk

__all__ = ["SETTLED_AFTER", "PartSplitter"]

SETTLED_AFTER = 256
"""Characters past a cut after which no token of ``ATOMIC_TOKENS`` (at most 202 long) can still
end across it."""


def _same(text: str) -> str:
    return text


class PartSplitter:
    """``splitter(text)``: the parts of ``text`` (escaped and chunked), reusing earlier work."""

    __slots__ = ("_clean", "_escape", "_fixed", "_fixed_length", "_max_length", "_unit")

    def __init__(
        self,
        *,
        escape: Callable[[str], str],
        max_length: int,
        unit: LengthUnit = LengthUnit.CHARACTERS,
        clean: Callable[[str], str] = _same,
    ) -> None:
        self._escape = escape
        self._clean = clean
        self._max_length = max_length
        self._unit = unit
        self._fixed: list[str] = []
        self._fixed_length = 0

    def _still_settled(self, escaped: str) -> bool:
        position = 0
        for part in self._fixed:  # compared in place: no second copy of the text is kept
            if not escaped.startswith(part, position):
                return False
            position += len(part)
        return True

    def __call__(self, text: str) -> list[str]:
        escaped = self._escape(self._clean(text))
        if "```" in escaped or "~~~" in escaped:
            # a code fence: chunk closes and reopens it across cuts (and decides that for the
            # whole text at once), so parts no longer concatenate to the text: cut it all
            self._fixed, self._fixed_length = [], 0
            return chunk(escaped, self._max_length, unit=self._unit)
        if not (self._fixed and self._still_settled(escaped)):
            self._fixed, self._fixed_length = [], 0
        # Cut the rest a window at a time (the chunker's work is per character, so a window
        # bounds its memory); the pieces of a window that end well before its end are the
        # whole text's: a cut depends on the text up to it and the longest token past it.
        window = 4 * self._max_length + 2 * SETTLED_AFTER
        while True:
            start = self._fixed_length
            piece_of = escaped[start : start + window]
            pieces = chunk(piece_of, self._max_length, unit=self._unit)
            last = start + len(piece_of) >= len(escaped)
            settled, end = self._settled(pieces, len(piece_of))
            if last or settled:
                self._fixed.extend(pieces[:settled])
                self._fixed_length = start + end
            if last:
                return [*self._fixed, *pieces[settled:]]
            if not settled:
                window *= 2  # a window with no settled cut (long tokens): look further

    @staticmethod
    def _settled(pieces: list[str], length: int) -> tuple[int, int]:
        """How many of ``pieces`` (which concatenate to ``length`` characters) are settled, and
        where they end: a cut is settled once the text runs on past it by the longest token
        (a token completed later, ``<@U1`` + ``>``, may forbid a cut allowed while it was open)."""
        end = length
        settled = len(pieces)
        for piece in reversed(pieces):
            if length - end >= SETTLED_AFTER:
                break
            end -= len(piece)
            settled -= 1
        return settled, end
