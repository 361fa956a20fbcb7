"""Turning pydantic's validation errors into config problems: a key path and what was expected.

Private to ``bridge_core.config``, which re-exports ``ConfigProblem``.
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Union

from pydantic import BaseModel, SecretStr, ValidationError
from pydantic.fields import FieldInfo

__all__ = ["ConfigProblem", "masked_url", "problems_from"]


@dataclass(frozen=True, slots=True)
class ConfigProblem:
    key: str  # a dotted key path such as "channels.ops.profile"; "" for the whole file
    message: str

    def __str__(self) -> str:
        return f"{self.key}: {self.message}" if self.key else self.message


# Never echo the value of a key that looks like it holds a secret pasted in by mistake.
_SECRET_KEY = re.compile(r"token|secret|password|key", re.IGNORECASE)

_URL_PASSWORD = re.compile(r"^([a-z][a-z0-9+.-]*://[^:/@]*:)([^@/]+)(@)", re.IGNORECASE)


def masked_url(value: str) -> str:
    """``value`` with the password of a ``scheme://user:password@host`` URL shown as ``***``:
    wherever a URL is shown (an error, ``chatbridge check``), never its password."""
    return _URL_PASSWORD.sub(r"\1***\3", value)


def problems_from(
    exc: ValidationError, *, prefix: str, model: type[BaseModel]
) -> list[ConfigProblem]:
    """One problem per pydantic error of ``model``, keyed ``prefix.loc`` without union tags."""
    problems = []
    hide_input = bool(model.model_config.get("hide_input_in_errors"))
    for error in exc.errors(include_url=False):
        loc = [str(part) for part in error["loc"] if not _is_union_branch(part)]
        key = ".".join([prefix, *loc] if prefix else loc)
        kind = error["type"]
        if kind == "missing":
            message = "is required"
            purpose = _summary(_field_at(model, loc))
            if purpose:
                message += f" ({purpose})"
        elif kind in ("model_type", "model_attributes_type", "dict_type"):
            message = "expected a table"
            if loc[-1:] == ["budget"]:
                message = "expected a budget preset name or a table"
            message += "" if hide_input else f" (got {type(error.get('input')).__name__})"
        elif kind == "extra_forbidden":
            allowed = _allowed_keys(model, loc[:-1])
            message = "unknown key" + (
                f"; expected one of: {', '.join(allowed)}" if allowed else ""
            )
        else:
            message = error["msg"].removeprefix("Value error, ")
            value = error.get("input")
            shown = not hide_input and not _SECRET_KEY.search(key)
            if shown and value is not None and not isinstance(value, (dict, list, SecretStr)):
                if isinstance(value, str):
                    value = masked_url(value)
                if repr(value) not in message:
                    message += f" (got {value!r})"
        problems.append(ConfigProblem(key, message))
    return problems


_UNION_BRANCHES = frozenset(
    {"str", "int", "float", "bool", "BudgetNumbers", "Secret", "budget-preset", "budget-numbers"}
)


def _is_union_branch(part: Any) -> bool:
    # pydantic puts the union member it tried into a location ("str", "BudgetNumbers").
    return isinstance(part, str) and (
        part in _UNION_BRANCHES or part.startswith(("function-", "constrained-"))
    )


def _allowed_keys(model: type[BaseModel], loc: Sequence[str]) -> list[str]:
    """The keys the table at ``loc`` accepts, found by walking the model's annotations."""
    current = _unwrap(_annotation_at(model, loc))
    if isinstance(current, type) and issubclass(current, BaseModel):
        return [name for name, f in current.model_fields.items() if not f.exclude]
    return []


def _field_at(model: type[BaseModel], loc: Sequence[str]) -> FieldInfo | None:
    """The field a key path ends at, or None when the path leads to no field of a model."""
    if not loc:
        return None
    table = _unwrap(_annotation_at(model, loc[:-1]))
    if isinstance(table, type) and issubclass(table, BaseModel):
        return table.model_fields.get(loc[-1])
    return None


def _annotation_at(model: type[BaseModel], loc: Sequence[str]) -> Any:
    """The annotation of the value at ``loc``: fields by name, tables of tables by any key,
    lists by index; None when the path leaves the models."""
    current: Any = model
    for part in loc:
        current = _unwrap(current)
        if isinstance(current, type) and issubclass(current, BaseModel):
            field = current.model_fields.get(part)
            if field is None:
                return None
            current = field.annotation
        elif typing.get_origin(current) is dict:
            current = typing.get_args(current)[1]
        elif typing.get_origin(current) is list and part.isdigit():
            current = typing.get_args(current)[0]
        else:
            return None
    return current


# A code span, or the end of a description's first clause (a full stop, semicolon or colon
# before a space): the first match that is not a code span ends the summary.
_CLAUSE_END = re.compile(r"``.*?``|`[^`]*`|[.;:](?=\s|$)", re.DOTALL)


def _summary(field: FieldInfo | None) -> str:
    """What a field is for, in a few words: its description's first clause, as plain text."""
    if field is None or not field.description:
        return ""
    text = " ".join(field.description.split())
    end = next(
        (m.start() for m in _CLAUSE_END.finditer(text) if not m.group().startswith("`")), None
    )
    summary = text[:end].replace("`", "")
    first_word = summary.split(" ", 1)[0]
    if first_word[1:].islower() or len(first_word) == 1:  # "The ..." but not "HTTP ..."
        summary = summary[:1].lower() + summary[1:]
    return summary


def _unwrap(annotation: Any) -> Any:
    """``X | None`` → ``X``, ``Annotated[X, ...]`` → ``X``, and a union with one model (a budget's
    preset name or table) → that model; anything else unchanged."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        members = [_unwrap(arg) for arg in typing.get_args(annotation) if arg is not type(None)]
        models = [m for m in members if isinstance(m, type) and issubclass(m, BaseModel)]
        if len(models) == 1:
            return models[0]
        if len(members) == 1:
            return members[0]
    return annotation
