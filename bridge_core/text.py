"""Preparing agent-controlled text for a platform: escape first, then chunk.

Escaping comes first because it lengthens text (``@everyone`` becomes ``@\u200beveryone``,
``&`` becomes ``&amp;``); chunking then splits at the provider's declared maximum, in the unit that
platform counts, never inside a character (a surrogate pair or a UTF-8 sequence) and never inside
an escape or a platform token such as ``<@U123>`` or ``&amp;``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from bridge_core.provider import LengthUnit

__all__ = [
    "ATOMIC_TOKENS",
    "REPLACEMENT",
    "InvalidText",
    "chunk",
    "find_invalid_text",
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
