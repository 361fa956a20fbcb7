"""Every config field has a description (simonw/llm's "every hook is documented" rule, for config).

The configuration reference (docs/configuration.md) shows each field's description, and a missing
key's error quotes it; a field added without one would show a blank. The rule covers the core's
models (everything reachable from ``BridgeConfig``) and the settings model of every installed
provider, the built-in console's and the plugins' in ``plugins/`` alike. The rule itself lives in
``bridge_core.testing.config_docs``, which the conformance kit also runs on any plugin's settings.
"""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ConfigDict

from bridge_core.config import BridgeConfig
from bridge_core.plugins import create_plugin_manager
from bridge_core.testing.config_docs import (
    HOW_TO_DESCRIBE,
    reachable_models,
    undescribed_fields,
    undocumented_models,
)

# The README's test command installs every plugin in plugins/; without them this rule would
# quietly check less.
EXPECTED_PROVIDERS = {"console", "slack", "discord", "teams"}


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
        f"{root}: {field}" for root, top in roots.items() for field in undescribed_fields(top)
    ]
    assert undescribed == [], f"{HOW_TO_DESCRIBE}: {undescribed}"


def test_every_config_model_has_a_docstring(roots: dict[str, type[BaseModel]]) -> None:
    # The reference introduces each table with its model's docstring.
    undocumented = [
        f"{root}: {model}" for root, top in roots.items() for model in undocumented_models(top)
    ]
    assert undocumented == []


def test_the_rule_finds_a_field_without_a_description() -> None:
    class Nested(BaseModel):
        model_config = ConfigDict(use_attribute_docstrings=True)

        bare: int = 1

    class Listed(BaseModel):
        """A table in a list."""

        model_config = ConfigDict(use_attribute_docstrings=True)

        described: int = 1
        """Described."""

    class Root(BaseModel):
        """The top."""

        model_config = ConfigDict(use_attribute_docstrings=True)

        tables: dict[str, Nested] = {}
        """Tables by name."""
        rows: list[Listed] | None = None

    assert set(reachable_models(Root)) == {Root, Nested, Listed}
    assert {name.split("<locals>.")[-1] for name in undescribed_fields(Root)} == {
        "Root.rows",
        "Nested.bare",
    }
    assert [name.split("<locals>.")[-1] for name in undocumented_models(Root)] == ["Nested"]
