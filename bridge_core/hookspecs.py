"""The hooks a bridge-core plugin implements.

Hooks *register* things and stay synchronous (simonw/llm's style): the async work lives on the
registered objects. A provider plugin is a distribution with an entry point in the group
``bridge_core`` pointing at a module with ``@hookimpl`` functions::

    from bridge_core import ProviderSettings, ProviderType, hookimpl

    class SlackSettings(ProviderSettings):
        bot_token: SecretStr

    @hookimpl
    def register_providers(register):
        register(ProviderType(name="slack", settings_model=SlackSettings, factory=..., ...))

A plugin may also name budget presets, so a profile can say ``budget = "slack"``::

    @hookimpl
    def register_budget_presets(register):
        register("slack", SLACK_BUDGET)

Hookimpls never declare default arguments (pluggy never passes them).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import pluggy
from pydantic import BaseModel, ConfigDict

from bridge_core.platform_errors import ErrorCodeTable
from bridge_core.provider import Capabilities, ChatProvider, KeyValueStore, SendBudget

__all__ = [
    "PROJECT_NAME",
    "ProviderContext",
    "ProviderSettings",
    "ProviderType",
    "hookimpl",
    "hookspec",
    "register_budget_presets",
    "register_providers",
]

PROJECT_NAME = "bridge_core"  # the pluggy project name and the entry-point group

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@dataclass(frozen=True, slots=True)
class ProviderContext:
    """What the core hands a provider factory besides its settings.

    ``api_base_url`` overrides the platform's API base (tests, proxies); ``public_url`` is how the
    platform reaches this gateway (for providers that register webhooks). The two are different
    directions and must never be confused: a provider posts to ``api_base_url``.
    """

    profile: str
    kv: KeyValueStore | None = None
    api_base_url: str | None = None
    public_url: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class ProviderSettings(BaseModel):
    """The base of a provider's settings model (a profile's ``settings`` table).

    Unknown keys are errors (a misspelt key must not be silently ignored), the validated settings
    are frozen, a rejected value is never echoed in an error (it may be a token), and each field's
    docstring is its description in the configuration reference and in a missing key's error
    (ADR 0062).
    """

    model_config = ConfigDict(
        extra="forbid", frozen=True, hide_input_in_errors=True, use_attribute_docstrings=True
    )


SettingsT = TypeVar("SettingsT", bound=BaseModel)


@dataclass(frozen=True, slots=True)
class ProviderType(Generic[SettingsT]):
    """A provider, declared without connecting to anything.

    ``settings_model`` validates a profile's ``settings`` table in config; ``factory`` builds one
    provider instance (one bot profile) from validated settings, and is type-checked against the
    model (``ProviderType[SlackSettings]``). ``budget`` is the default send budget; a profile may
    override it in config. ``error_codes`` is the platform's table of error codes as the provider
    reads them; the documentation lists it.
    """

    name: str
    capabilities: Capabilities
    budget: SendBudget
    settings_model: type[SettingsT]
    factory: Callable[[SettingsT, ProviderContext], ChatProvider]
    description: str = ""
    error_codes: ErrorCodeTable[Any] | None = None
    distribution: str | None = None  # filled in by the loader from the entry point


@hookspec
def register_providers(register: Callable[[ProviderType[Any]], None]) -> None:
    """Register provider types by calling ``register(ProviderType(...))`` once for each.

    :param register: call it with each ``ProviderType`` this plugin offers.
    """


@hookspec
def register_budget_presets(register: Callable[[str, SendBudget], None]) -> None:
    """Register named send budgets by calling ``register(name, budget)`` once for each.

    A profile (or a provider's settings) then says ``budget = "name"``, or starts a table of
    numbers from it (``budget = { preset = "name", burst = 5 }``). The core itself offers only
    ``unlimited``; a name two plugins register is refused for the second.

    :param register: call it with each preset's name and its ``SendBudget``.
    """
