"""Every config field has a description (simonw/llm's "every hook is documented" rule, for config).

The configuration reference (docs/configuration.md) shows each field's description, and a missing
key's error quotes it; a field added without one would show a blank. The rule covers the core's
models (everything reachable from ``BridgeConfig``) and the settings model of every installed
provider, the built-in console's and the plugins' in ``plugins/`` alike.
"""

from __future__ import annotations

import typing
from collections.abc import Iterator

import pytest
from pydantic import BaseModel

from bridge_core.config import BridgeConfig
from bridge_core.plugins import create_plugin_manager

# The README's test command installs every plugin in plugins/; without them this rule would
# quietly check less.
EXPECTED_PROVIDERS = {"console", "slack", "discord", "teams"}


def _models_in(annotation: object) -> Iterator[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
        return
    for arg in typing.get_args(annotation):
        yield from _models_in(arg)


def _reachable(root: type[BaseModel]) -> list[type[BaseModel]]:
    """``root`` and every model its fields mention, at any depth."""
    seen: list[type[BaseModel]] = []
    stack = [root]
    while stack:
        model = stack.pop()
        if model not in seen:
            seen.append(model)
            for field in model.model_fields.values():
                stack.extend(_models_in(field.annotation))
    return seen


@pytest.fixture(scope="module")
def roots() -> dict[str, type[BaseModel]]:
    """The top model of ``bridge.toml`` and each installed provider's settings model."""
    entries = create_plugin_manager().providers.entries()
    return {
        "bridge.toml": BridgeConfig,
        **{f"{entry.type.name} settings": entry.type.settings_model for entry in entries},
    }


def test_the_plugins_of_this_repository_are_installed(roots: dict[str, type[BaseModel]]) -> None:
    installed = {name.removesuffix(" settings") for name in roots}
    missing = EXPECTED_PROVIDERS - installed
    assert missing == set(), f"install plugins/* (see README.md) to check their settings: {missing}"


def test_every_config_field_has_a_description(roots: dict[str, type[BaseModel]]) -> None:
    undescribed = [
        f"{root}: {model.__module__}.{model.__name__}.{name}"
        for root, top in roots.items()
        for model in _reachable(top)
        for name, field in model.model_fields.items()
        if not (field.description or "").strip()
    ]
    assert undescribed == [], (
        "describe these config fields (an attribute docstring under the field, with "
        f"use_attribute_docstrings=True in the model's config): {undescribed}"
    )


def test_every_config_model_has_a_docstring(roots: dict[str, type[BaseModel]]) -> None:
    # The reference introduces each table with its model's docstring.
    undocumented = [
        f"{root}: {model.__module__}.{model.__name__}"
        for root, top in roots.items()
        for model in _reachable(top)
        if not (model.__doc__ or "").strip()
    ]
    assert undocumented == []


def test_the_rule_finds_a_field_without_a_description() -> None:
    class Nested(BaseModel):
        """A table."""

        bare: int = 1

    class Root(BaseModel):
        """The top."""

        tables: dict[str, Nested] = {}

    fields = [
        (model.__name__, name, field.description)
        for model in _reachable(Root)
        for name, field in model.model_fields.items()
    ]
    assert ("Nested", "bare", None) in fields
