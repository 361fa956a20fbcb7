"""Small helpers for rendering code objects as markdown: table cells, docstrings, types, values."""

from __future__ import annotations

import enum
import inspect
import json
import types
import typing
from collections.abc import Iterator
from pathlib import PurePath
from typing import Any

__all__ = [
    "cell",
    "code_cell",
    "default_text",
    "display_type",
    "doc_text",
    "duration",
    "first_paragraph",
    "models_in",
    "number",
    "toml_value",
    "type_name",
    "without_none",
]


def cell(text: str) -> str:
    """Make text safe inside a markdown table cell: one line, and pipes escaped except inside
    code spans (where a table already reads them as text, and a backslash would show)."""
    pieces = " ".join(text.split()).split("`")
    return "`".join(
        piece if inside_code else piece.replace("|", "\\|")
        for inside_code, piece in ((i % 2 == 1, p) for i, p in enumerate(pieces))
    )


def code_cell(text: str) -> str:
    """Text as one code span in a table cell."""
    return "`" + " ".join(text.split()).replace("`", "'") + "`"


def first_paragraph(doc: str | None) -> str:
    if not doc:
        return ""
    paragraph = inspect.cleandoc(doc).split("\n\n", 1)[0]
    # reStructuredText literals read as markdown code.
    return " ".join(paragraph.split()).replace("``", "`")


def number(value: float) -> str:
    return f"{value:,.0f}" if value >= 1000 else f"{value:g}"


def duration(seconds: float) -> str:
    for unit, size in (("days", 86400.0), ("hours", 3600.0), ("minutes", 60.0)):
        if seconds >= size and seconds % size == 0:
            count = int(seconds // size)
            return f"{count} {unit[:-1] if count == 1 else unit}"
    return f"{seconds:g} s"


def type_name(annotation: Any) -> str:
    """A readable name for a type annotation: ``str | None``, ``dict[str, Profile]``."""
    if annotation is type(None):
        return "None"
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return " | ".join(repr(arg) for arg in typing.get_args(annotation))
    if origin is typing.Annotated:
        return type_name(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_name(arg) for arg in typing.get_args(annotation))
    if origin is not None:
        args = typing.get_args(annotation)
        base = getattr(origin, "__name__", str(origin))
        return f"{base}[{', '.join(type_name(arg) for arg in args)}]" if args else base
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


def models_in(annotation: Any) -> Iterator[type[Any]]:
    """The pydantic models mentioned anywhere in an annotation."""
    from pydantic import BaseModel

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
        return
    for arg in typing.get_args(annotation):
        yield from models_in(arg)


def toml_value(value: Any) -> str:
    """A default as it would be written in TOML."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    if isinstance(value, dict):
        if not value:
            return "{}"
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }"
    return repr(value)


def default_text(field: Any) -> str:
    from pydantic import BaseModel
    from pydantic_core import PydanticUndefined

    if field.is_required():
        return "**required**"
    if field.default_factory is not None:
        try:
            value = field.default_factory()
        except TypeError:  # a factory that takes the validated data
            return "computed"
    else:
        value = field.default
    if value is PydanticUndefined:
        return "**required**"
    if value is None:
        return "not set"
    if isinstance(value, BaseModel):
        return "the table's defaults"
    if isinstance(value, enum.Enum):
        value = value.value
    return f"`{toml_value(value)}`"


def without_none(annotation: Any) -> Any:
    """``X | None`` is ``X``; any other annotation is itself."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        members = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        if len(members) == 1:
            return members[0]
    return annotation


def display_type(annotation: Any) -> str:
    """The type as a config author reads it: tables, paths and secrets named as such, a choice
    of strings quoted as TOML writes them, and no ``None`` (an absent key is the default)."""
    from pydantic import BaseModel, SecretStr

    if annotation is Any:
        return "table"
    if isinstance(annotation, type):
        if issubclass(annotation, BaseModel):
            return "table"
        if issubclass(annotation, SecretStr):
            return 'secret ({ env = "NAME" })'
        if issubclass(annotation, PurePath):
            return "path"
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        return " | ".join(toml_value(arg) for arg in args)
    if origin is typing.Annotated:
        return display_type(args[0])
    if origin in (typing.Union, types.UnionType):
        return " | ".join(display_type(arg) for arg in args if arg is not type(None))
    if origin is not None and args:
        base = getattr(origin, "__name__", str(origin))
        return f"{base}[{', '.join(display_type(arg) for arg in args)}]"
    return type_name(annotation)


def doc_text(doc: str | None) -> str:
    """A docstring (a field's description) as one markdown line: reStructuredText literals read
    as markdown code."""
    return " ".join((doc or "").split()).replace("``", "`")
