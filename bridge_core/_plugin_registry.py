"""What loading the plugins found: the registry of provider types and budget presets, the
plugins that failed, and the errors of asking for a provider.

Re-exported by ``bridge_core.plugins`` (import them from there); this module exists so that file
stays one idea (finding, loading and calling the plugins). The registry is a value built once the
hooks have run; it never loads anything itself, and it keeps the broken plugins and the
distributions ``CHATBRIDGE_LOAD_PLUGINS`` left out only to say why a provider is missing.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from bridge_core.errors import BridgeError
from bridge_core.hookspecs import ProviderType
from bridge_core.provider import UNLIMITED_BUDGET, SendBudget

__all__ = [
    "CORE_BUDGET_PRESETS",
    "LOAD_PLUGINS_VAR",
    "BrokenPlugin",
    "PluginError",
    "PluginLoadError",
    "ProviderNameClash",
    "ProviderRegistry",
    "RegisteredProvider",
    "UnknownProvider",
    "normalize_distribution_name",
]

LOAD_PLUGINS_VAR = "CHATBRIDGE_LOAD_PLUGINS"

CORE_BUDGET_PRESETS: Mapping[str, SendBudget] = {"unlimited": UNLIMITED_BUDGET}
"""The presets the core offers itself; every other one comes from a plugin's
``register_budget_presets``."""


class PluginError(BridgeError):
    """A problem with the installed plugins."""


class PluginLoadError(PluginError):
    """A plugin failed to import, register or validate (raised only in strict mode)."""

    def __init__(self, broken: BrokenPlugin) -> None:
        super().__init__(broken.describe())
        self.broken = broken


class ProviderNameClash(PluginError):
    """Two plugins registered a provider under one name; the message names both distributions."""

    def __init__(self, name: str, first: str, second: str) -> None:
        super().__init__(
            f"provider {name!r} is registered by two plugins: {first} and {second}; uninstall one "
            f"of them, or choose which plugins load with {LOAD_PLUGINS_VAR}=<distribution,...>"
        )
        self.name = name
        self.distributions = (first, second)


class UnknownProvider(PluginError, LookupError):
    """No installed plugin offers the requested provider; the message lists the installed ones."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name


def normalize_distribution_name(name: str) -> str:
    """PEP 503 normalisation: ``Bridge_Slack`` and ``bridge.slack`` both mean ``bridge-slack``."""
    return re.sub(r"[-_.]+", "-", name).lower().strip()


@dataclass(frozen=True, slots=True)
class BrokenPlugin:
    """A plugin that failed to load; reported once and kept for ``chatbridge providers``."""

    distribution: str
    version: str
    entry_point: str  # "name = module:attr", or the built-in module's name
    error_type: str
    error: str

    def describe(self) -> str:
        return (
            f"plugin {self.distribution} {self.version} (entry point {self.entry_point!r}) "
            f"failed to load: {self.error_type}: {self.error}"
        )

    def to_json(self) -> dict[str, str]:
        return dataclasses.asdict(self)


@dataclass(frozen=True, slots=True)
class RegisteredProvider:
    """A provider type with the distribution that offered it."""

    type: ProviderType[Any]
    distribution: str
    version: str

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.type.name,
            "distribution": self.distribution,
            "version": self.version,
            "description": self.type.description,
            "capabilities": self.type.capabilities.to_json(),
            "budget": self.type.budget.to_json(),
        }


class ProviderRegistry:
    """The provider types the loaded plugins registered, by name (``in``, iteration in name
    order, ``len``, ``registry[name]`` and ``get(name)``, which raises ``UnknownProvider``), and
    the budget presets they named (``budget_presets``: the core's ``unlimited`` and every one
    given in ``presets``)."""

    def __init__(
        self,
        entries: Iterable[RegisteredProvider] = (),
        *,
        presets: Mapping[str, SendBudget] | None = None,
        broken: Sequence[BrokenPlugin] = (),
        not_loaded: Sequence[str] = (),
    ) -> None:
        self._entries: dict[str, RegisteredProvider] = {}
        for entry in entries:
            self._add(entry)
        self._presets = {**(presets or {}), **CORE_BUDGET_PRESETS}
        self._broken = tuple(broken)
        self._not_loaded = tuple(not_loaded)

    @property
    def budget_presets(self) -> Mapping[str, SendBudget]:
        """Every budget preset a profile may name, by name (read-only)."""
        return MappingProxyType(self._presets)

    def _add(self, entry: RegisteredProvider) -> None:
        previous = self._entries.get(entry.type.name)
        if previous is not None:
            raise ProviderNameClash(
                entry.type.name,
                f"{previous.distribution} {previous.version}",
                f"{entry.distribution} {entry.version}",
            )
        self._entries[entry.type.name] = entry

    def __getitem__(self, name: str) -> ProviderType[Any]:
        return self.get_entry(name).type

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def get(self, name: str) -> ProviderType[Any]:
        """The provider type called ``name``; raises ``UnknownProvider`` saying how to get it."""
        return self.get_entry(name).type

    def get_entry(self, name: str) -> RegisteredProvider:
        try:
            return self._entries[name]
        except KeyError:
            raise UnknownProvider(name, self.missing_message(name)) from None

    def entries(self) -> list[RegisteredProvider]:
        return [self._entries[name] for name in self]

    def missing_message(self, name: str) -> str:
        """Why ``name`` is not available and what to do about it."""
        installed = ", ".join(self) or "none"
        dist = f"bridge-{name}"
        lines = [f"no provider named {name!r} is installed (installed providers: {installed})."]
        for broken in self._broken:
            if normalize_distribution_name(broken.distribution) == dist:
                # The load error itself was logged when it happened: name it, do not repeat it.
                lines.append(
                    f"{dist} is installed but broken ({broken.error_type} when it loaded,"
                    " reported above; `chatbridge plugins` shows it)."
                )
                break
        else:
            if dist in self._not_loaded:
                lines.append(
                    f"{dist} is installed but {LOAD_PLUGINS_VAR} leaves it out;"
                    " add it to that comma-separated list."
                )
            else:
                lines.append(
                    f"Install it with: chatbridge install {dist}"
                    " (pip, into the environment chatbridge runs in)"
                )
        return " ".join(lines)
