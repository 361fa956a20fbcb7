"""Walking config values: before validation, nesting a config never needs (a 5,000-deep table
would end the recursive steps in ``RecursionError``) and text no store can carry (ADR 0070);
after it, relative paths made relative to the config file. Private to ``bridge_core.config``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from bridge_core._config_problems import ConfigProblem
from bridge_core.text import find_invalid_text

__all__ = ["MAX_DEPTH", "input_problems", "paths_beside"]

MAX_DEPTH = 32
"""Tables and arrays nested deeper than this are refused: the deepest real key path
(``profiles.x.settings.faults.0.channel``) is six levels."""


def _too_deep(data: Any) -> str | None:
    """The key path (its first levels) of a value nested deeper than ``MAX_DEPTH``, or None."""
    stack: list[tuple[tuple[str, ...], Any]] = [((), data)]
    while stack:
        path, item = stack.pop()
        if len(path) > MAX_DEPTH:
            return ".".join(path[:6]) + ".…"
        if isinstance(item, Mapping):
            stack.extend(((*path, str(key)), child) for key, child in item.items())
        elif isinstance(item, list):
            stack.extend(((*path, str(i)), child) for i, child in enumerate(item))
    return None


def input_problems(data: Any) -> list[ConfigProblem]:
    """Problems that make the rest of the loading unsafe or pointless; checked first."""
    deep = _too_deep(data)
    if deep is not None:
        return [
            ConfigProblem(
                deep.split(".", 1)[0],
                f"nested more than {MAX_DEPTH} levels deep (at {deep}); a config needs a handful",
            )
        ]
    invalid = find_invalid_text(data)
    if invalid is not None:
        return [ConfigProblem(invalid.field, invalid.reason)]
    return []


def paths_beside(value: Any, folder: Path) -> Any:
    """``value`` with each relative ``Path`` in it, at any depth of models, lists, tuples and
    dicts, made relative to ``folder`` (the config file's); everything else is kept as it is.

    A provider's settings are read like ``stores.ledger``: a path in the file means the same
    file whatever folder the gateway is started from (ADR 0063). Only values pydantic produced as
    ``Path`` are touched, so a setting typed ``str`` is never mistaken for one.
    """
    if isinstance(value, Path):
        return value if value.is_absolute() else folder / value
    if isinstance(value, BaseModel):
        changed = {}
        for name in type(value).model_fields:
            current = getattr(value, name)
            resolved = paths_beside(current, folder)
            if resolved is not current:
                changed[name] = resolved
        # model_copy, not a new validation: the values were validated, and a frozen model stays so.
        return value.model_copy(update=changed) if changed else value
    if isinstance(value, (list, tuple)):
        items = [paths_beside(item, folder) for item in value]
        if all(new is old for new, old in zip(items, value, strict=True)):
            return value
        return items if isinstance(value, list) else tuple(items)
    if isinstance(value, dict):
        entries = {key: paths_beside(item, folder) for key, item in value.items()}
        if all(entries[key] is item for key, item in value.items()):
            return value
        return entries
    return value
