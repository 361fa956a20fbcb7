"""A config is a boundary: whatever a TOML file can hold, at any key, gives a config or a
``ConfigError`` naming where it is wrong, never another exception. Values are drawn over full
Unicode (lone surrogates, NUL, control characters), nested deeply, at the keys this round
changed (a budget preset's name, now checked against the registry's presets; a channel's event
kinds, now read from the event classes) and beside them."""

from __future__ import annotations

from typing import Any

import bridge_slack.plugin
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge_core.config import ConfigError, parse_config
from bridge_core.plugins import ProviderRegistry, create_plugin_manager

TEXT = st.text(st.characters(codec=None, categories=None), max_size=40)  # surrogates included
SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | TEXT
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=40,
)
DEEP = st.integers(1, 200).map(lambda depth: _nested(depth))


def _nested(depth: int) -> Any:
    value: Any = "x"
    for n in range(depth):
        value = {"preset": value} if n % 2 else [value]
    return value


def _registry() -> ProviderRegistry:
    presets = type(
        "slack:presets",
        (),
        {"register_budget_presets": staticmethod(bridge_slack.plugin.register_budget_presets)},
    )
    return create_plugin_manager(load_entry_points=False, extra_plugins=[presets]).providers


REGISTRY = _registry()


def _parses_or_names_the_key(data: dict[str, Any], *, under: str = "profiles") -> None:
    try:
        parse_config(data, providers=REGISTRY)
    except ConfigError as error:
        assert error.problems, "a ConfigError names at least one problem"
        for problem in error.problems:
            # too deep a value is refused at its section, with the path in the message
            where = problem.key if problem.key.startswith(under) else problem.message
            assert under in where, (problem.key, problem.message)
            assert problem.message, problem.key


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(value=VALUES | DEEP)
def test_any_value_as_the_budget_is_a_config_or_an_error_at_its_key(value: Any) -> None:
    _parses_or_names_the_key({"profiles": {"p": {"provider": "console", "budget": value}}})


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(name=TEXT, extra=st.dictionaries(TEXT, VALUES, max_size=3))
def test_any_preset_name_and_keys_beside_it(name: str, extra: dict[str, Any]) -> None:
    budget = {"preset": name, **extra}
    _parses_or_names_the_key({"profiles": {"p": {"provider": "console", "budget": budget}}})
    _parses_or_names_the_key(
        {"profiles": {"p": {"provider": "console", "settings": {"budget": name}}}}
    )


@settings(max_examples=150)
@given(kinds=VALUES | DEEP | st.lists(TEXT, max_size=5))
def test_any_value_as_a_channels_event_kinds_is_a_config_or_an_error_at_its_key(
    kinds: Any,
) -> None:
    # The kinds a filter may name come from the event classes since this round (not "Unknown").
    channel = {"profile": "p", "channel_id": "C", "kinds": kinds}
    _parses_or_names_the_key(
        {"profiles": {"p": {"provider": "console"}}, "channels": {"ops": channel}},
        under="channels.ops",
    )
