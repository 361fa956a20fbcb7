"""The rule that every config key is documented, for the core's own models and any plugin's.

The configuration reference shows each field's description and introduces each table with its
model's docstring, and a missing key's error quotes the description (ADR 0062): a field without
one leaves a blank. ``undescribed_fields(root)`` and ``undocumented_models(root)`` list what
breaks the rule in ``root`` and every model its fields mention, at any depth (tables, lists and
dicts of tables). The core's test runs them on ``BridgeConfig`` and the installed providers'
settings; ``ProviderConformance.test_settings_are_documented`` runs them on a plugin's.
"""

from __future__ import annotations

import typing
from collections.abc import Iterator

from pydantic import BaseModel

__all__ = ["HOW_TO_DESCRIBE", "reachable_models", "undescribed_fields", "undocumented_models"]

HOW_TO_DESCRIBE = (
    "describe each field with an attribute docstring under it (use_attribute_docstrings=True in "
    "the model's config) or Field(description=...), and give each model a docstring"
)


def _models_in(annotation: object) -> Iterator[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
        return
    for arg in typing.get_args(annotation):
        yield from _models_in(arg)


def reachable_models(root: type[BaseModel]) -> list[type[BaseModel]]:
    """``root`` and every model its fields mention, at any depth, each once."""
    seen: list[type[BaseModel]] = []
    stack = [root]
    while stack:
        model = stack.pop()
        if model not in seen:
            seen.append(model)
            for field in model.model_fields.values():
                stack.extend(_models_in(field.annotation))
    return seen


def undescribed_fields(root: type[BaseModel]) -> list[str]:
    """``module.Model.field`` for each field reachable from ``root`` with no description."""
    return [
        f"{model.__module__}.{model.__qualname__}.{name}"
        for model in reachable_models(root)
        for name, field in model.model_fields.items()
        if not (field.description or "").strip()
    ]


def undocumented_models(root: type[BaseModel]) -> list[str]:
    """``module.Model`` for each model reachable from ``root`` without a docstring."""
    return [
        f"{model.__module__}.{model.__qualname__}"
        for model in reachable_models(root)
        if not (model.__doc__ or "").strip()
    ]
