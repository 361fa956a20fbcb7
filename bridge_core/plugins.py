"""Finding and loading plugins, and the registry of the provider types they offer.

``create_plugin_manager()`` builds a pluggy manager with the built-in plugins (the console
provider) registered through the same hooks as any other, then loads each entry point of the group
``bridge_core`` on its own: a broken plugin is logged once with its distribution, version, entry
point and error, kept in ``PluginManager.broken`` (``chatbridge providers`` shows it), and the rest
still load; ``strict=True`` re-raises instead. ``CHATBRIDGE_LOAD_PLUGINS`` (a comma list of
distribution names; an empty value loads only the built-ins) restricts which external plugins load,
and ``CHATBRIDGE_TRACE_HOOKS=1`` logs every hook call to standard error.

Nothing happens at import: every manager is built by the factory, so tests and embedders get a
fresh one each time. What loading found (the ``ProviderRegistry``, ``BrokenPlugin``) and the
errors below are defined in ``bridge_core._plugin_registry`` and re-exported here.

Exception hierarchy::

    PluginError                 a problem with the installed plugins
    ├── PluginLoadError         a plugin failed to load or register (raised in strict mode)
    ├── ProviderNameClash       two plugins registered one provider name
    └── UnknownProvider         no installed plugin offers the requested provider (a LookupError)
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import os
import re
import sys
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from types import ModuleType
from typing import Any

import pluggy

from bridge_core import hookspecs
from bridge_core._plugin_registry import (
    CORE_BUDGET_PRESETS,
    LOAD_PLUGINS_VAR,
    BrokenPlugin,
    PluginError,
    PluginLoadError,
    ProviderNameClash,
    ProviderRegistry,
    RegisteredProvider,
    UnknownProvider,
    normalize_distribution_name,
)
from bridge_core.hookspecs import PROJECT_NAME, ProviderType
from bridge_core.provider import SendBudget

__all__ = [
    "BUILTIN_PLUGINS",
    "CORE_BUDGET_PRESETS",
    "CORE_DISTRIBUTION",
    "ENTRY_POINT_GROUP",
    "LOAD_PLUGINS_VAR",
    "TRACE_HOOKS_VAR",
    "BrokenPlugin",
    "LoadedPlugin",
    "PluginError",
    "PluginLoadError",
    "PluginManager",
    "ProviderNameClash",
    "ProviderRegistry",
    "RegisteredProvider",
    "UnknownProvider",
    "create_plugin_manager",
    "normalize_distribution_name",
]

logger = logging.getLogger(__name__)

ENTRY_POINT_GROUP = PROJECT_NAME
TRACE_HOOKS_VAR = "CHATBRIDGE_TRACE_HOOKS"
CORE_DISTRIBUTION = "bridge-core"
BUILTIN_PLUGINS: tuple[str, ...] = ("bridge_core.providers.console",)

_PROVIDER_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")


@dataclass(frozen=True, slots=True)
class LoadedPlugin:
    """A registered plugin, for ``chatbridge plugins``."""

    name: str  # the name it is registered under in pluggy
    distribution: str
    version: str
    builtin: bool
    hooks: tuple[str, ...]
    error: str | None = None  # "TypeError: ..." when one of its hooks raised

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "distribution": self.distribution,
            "version": self.version,
            "builtin": self.builtin,
            "hooks": list(self.hooks),
            "status": "broken" if self.error is not None else "ok",
            "error": self.error,
        }


def _distribution_of(ep: EntryPoint) -> tuple[str, str]:
    dist = ep.dist
    if dist is None:
        return ("unknown-distribution", "unknown")
    name = dist.metadata["Name"] or dist.name
    return (normalize_distribution_name(name), dist.version or "unknown")


def _core_version() -> str:
    from bridge_core import __version__

    return __version__


class PluginManager:
    """The pluggy manager plus what loading learned: plugins, broken plugins, their providers.

    Build one with ``create_plugin_manager()``.
    """

    def __init__(self, *, strict: bool = False, trace: bool = False) -> None:
        self.pm = pluggy.PluginManager(PROJECT_NAME)
        self.pm.add_hookspecs(hookspecs)
        self.strict = strict
        self.broken: list[BrokenPlugin] = []
        self.not_loaded: list[str] = []  # distributions left out by CHATBRIDGE_LOAD_PLUGINS
        self.missing: list[str] = []  # named by CHATBRIDGE_LOAD_PLUGINS but not installed
        self.installed: set[str] = set()  # distributions with a bridge_core entry point
        self._origin: dict[str, tuple[str, str, bool]] = {}  # plugin name -> (dist, ver, builtin)
        self._providers: ProviderRegistry | None = None
        if trace:
            tracer = _HookTracer()
            self.pm.add_hookcall_monitoring(tracer.before, tracer.after)

    @property
    def hook(self) -> Any:
        return self.pm.hook

    # ------------------------------------------------------------------ registration

    def register(
        self,
        plugin: object,
        *,
        name: str | None = None,
        distribution: str = CORE_DISTRIBUTION,
        version: str | None = None,
        builtin: bool = True,
        entry_point: str | None = None,
    ) -> bool:
        """Register one plugin; on failure unregister it, report it and return False (or raise
        ``PluginLoadError`` in strict mode)."""
        plugin_name = name or getattr(plugin, "__name__", None) or repr(plugin)
        version = version if version is not None else _core_version()
        if self.pm.has_plugin(plugin_name) or self.pm.is_registered(plugin):
            # Two entry points naming one module: keep the first, never unregister it.
            duplicate = PluginError(f"plugin {plugin_name!r} (or its module) is already registered")
            label = entry_point or plugin_name
            self._report(
                BrokenPlugin(distribution, version, label, _type(duplicate), str(duplicate)),
                duplicate,
            )
            return False
        try:
            self.pm.register(plugin, name=plugin_name)
            # A misspelled hook name only shows here; checked per plugin so the blame is exact.
            self.pm.check_pending()
        except Exception as exc:
            self._unregister_quietly(plugin, plugin_name)
            self._report(
                BrokenPlugin(
                    distribution, version, entry_point or plugin_name, _type(exc), str(exc)
                ),
                exc,
            )
            return False
        self._origin[plugin_name] = (distribution, version, builtin)
        self._providers = None
        return True

    def unregister(self, name: str) -> None:
        plugin = self.pm.get_plugin(name)
        if plugin is not None:
            self.pm.unregister(plugin, name=name)
        self._origin.pop(name, None)
        self._providers = None

    def _unregister_quietly(self, plugin: object, name: str) -> None:
        # pluggy leaves a plugin half-registered after a failed register().
        try:
            if self.pm.is_registered(plugin) or self.pm.has_plugin(name):
                self.pm.unregister(
                    plugin=plugin if self.pm.is_registered(plugin) else None, name=name
                )
        except Exception:  # pragma: no cover - unregistering a half-registered plugin
            logger.debug("could not unregister %s", name, exc_info=True)

    def _report(self, broken: BrokenPlugin, exc: BaseException) -> None:
        if self.strict:
            raise PluginLoadError(broken) from exc
        self.broken.append(broken)
        logger.error("%s", broken.describe())

    def load_builtins(self, modules: Sequence[str] = BUILTIN_PLUGINS) -> None:
        """Register the built-in plugins; a broken built-in is a bug in the core and raises."""
        for module_name in modules:
            module = importlib.import_module(module_name)
            if not self.register(module, name=module_name, builtin=True):
                raise PluginLoadError(self.broken[-1])

    def load_entry_points(self, *, allowed: frozenset[str] | None) -> None:
        """Load each entry point of the ``bridge_core`` group on its own.

        ``allowed`` is a set of normalised distribution names, or None to load every one.
        """
        seen: set[tuple[str, str]] = set()
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            distribution, version = _distribution_of(ep)
            key = (distribution, ep.name)
            if key in seen:  # one distribution visible twice on sys.path
                continue
            seen.add(key)
            self.installed.add(distribution)
            if allowed is not None and distribution not in allowed:
                if distribution not in self.not_loaded:
                    self.not_loaded.append(distribution)
                continue
            label = f"{ep.name} = {ep.value}"
            try:
                plugin = ep.load()
            except Exception as exc:
                self._report(BrokenPlugin(distribution, version, label, _type(exc), str(exc)), exc)
                continue
            self.register(
                plugin,
                name=f"{distribution}:{ep.name}",
                distribution=distribution,
                version=version,
                builtin=False,
                entry_point=label,
            )
        for distribution in sorted((allowed or frozenset()) - self.installed):
            self.missing.append(distribution)
            # As llm does for LLM_LOAD_PLUGINS: a name that matches nothing is a typo or a
            # plugin not installed here, never silently nothing.
            installed = ", ".join(sorted(self.installed)) or "none"
            logger.warning(
                "%s names %s, which is not installed as a plugin here (installed plugin"
                " distributions: %s); install it with `chatbridge install %s`, or correct the list",
                LOAD_PLUGINS_VAR,
                distribution,
                installed,
                distribution,
            )

    # ------------------------------------------------------------------ what is loaded

    def plugins(self) -> list[LoadedPlugin]:
        """Every registered plugin with its distribution, the hooks it implements, and the error
        of a hook that raised (the providers are collected first, so that error is known)."""
        try:
            _ = self.providers
        except ProviderNameClash:
            pass  # the hooks all ran; the commands that need the providers report the clash
        failed = {broken.entry_point: broken for broken in self.broken}
        out: list[LoadedPlugin] = []
        for name, plugin in self.pm.list_name_plugin():
            if plugin is None:
                continue
            distribution, version, builtin = self._origin.get(name, ("unknown", "unknown", False))
            callers = self.pm.get_hookcallers(plugin) or []
            broken = failed.get(name)
            out.append(
                LoadedPlugin(
                    name=name,
                    distribution=distribution,
                    version=version,
                    builtin=builtin,
                    hooks=tuple(sorted(caller.name for caller in callers)),
                    error=f"{broken.error_type}: {broken.error}" if broken else None,
                )
            )
        return sorted(out, key=lambda p: (not p.builtin, p.distribution, p.name))

    @property
    def providers(self) -> ProviderRegistry:
        """The provider registry, built on first use by calling ``register_providers`` once per
        plugin (so each provider is attributed to its distribution)."""
        if self._providers is None:
            self._providers = self._collect_providers()
        return self._providers

    def _implementers(self, hook: str) -> Iterator[tuple[str, str, str, Any]]:
        """(plugin name, distribution, version, a caller of ``hook`` on that plugin alone) for
        each plugin implementing ``hook``, so what it registers is attributed to it."""
        impls = getattr(self.pm.hook, hook).get_hookimpls()
        plugins = [(name, p) for name, p in self.pm.list_name_plugin() if p is not None]
        for name, plugin in plugins:
            if not any(impl.plugin is plugin for impl in impls):
                continue
            distribution, version, _ = self._origin.get(name, ("unknown", "unknown", False))
            others = [p for _, p in plugins if p is not plugin]
            yield name, distribution, version, self.pm.subset_hook_caller(hook, others)

    def _called(
        self, caller: Any, register: Any, name: str, distribution: str, version: str
    ) -> bool:
        """Call ``caller(register=register)``; a plugin whose hook raised is reported broken."""
        try:
            caller(register=register)
        except Exception as exc:
            self._report(BrokenPlugin(distribution, version, name, _type(exc), str(exc)), exc)
            return False
        return True

    def _collect_providers(self) -> ProviderRegistry:
        entries: list[RegisteredProvider] = []
        for name, distribution, version, caller in self._implementers("register_providers"):
            collected: list[ProviderType[Any]] = []

            def register(
                provider_type: ProviderType[Any], _into: list[ProviderType[Any]] = collected
            ) -> None:
                if not isinstance(provider_type, ProviderType):
                    raise TypeError(
                        f"register() takes a ProviderType, got {type(provider_type).__name__}"
                    )
                if not _PROVIDER_NAME.match(provider_type.name):
                    raise ValueError(
                        f"provider name {provider_type.name!r} must be lowercase letters, digits,"
                        " '-' or '_', starting with a letter"
                    )
                _into.append(provider_type)

            if not self._called(caller, register, name, distribution, version):
                continue
            for provider_type in collected:
                typed = dataclasses.replace(provider_type, distribution=distribution)
                entries.append(RegisteredProvider(typed, distribution, version))
        presets = self._collect_budget_presets()
        # Built after the hook calls, so a plugin whose hook failed is among the broken ones.
        return ProviderRegistry(
            entries, presets=presets, broken=self.broken, not_loaded=self.not_loaded
        )

    def _collect_budget_presets(self) -> dict[str, SendBudget]:
        """Call ``register_budget_presets`` once per plugin; a plugin whose hook raised, or that
        names a preset already taken, is reported as broken and none of its presets count."""
        presets: dict[str, SendBudget] = dict(CORE_BUDGET_PRESETS)
        owners = dict.fromkeys(presets, CORE_DISTRIBUTION)
        for name, distribution, version, caller in self._implementers("register_budget_presets"):
            collected: dict[str, SendBudget] = {}

            def register(
                preset: str, budget: SendBudget, _into: dict[str, SendBudget] = collected
            ) -> None:
                if not isinstance(budget, SendBudget):
                    raise TypeError(
                        f"register() takes a name and a SendBudget, got {type(budget).__name__}"
                    )
                if not isinstance(preset, str) or not _PROVIDER_NAME.match(preset):
                    raise ValueError(
                        f"budget preset name {preset!r} must be lowercase letters, digits, '-'"
                        " or '_', starting with a letter"
                    )
                if preset in presets or preset in _into:
                    owner = owners.get(preset, "this plugin")
                    raise ValueError(f"budget preset {preset!r} is already registered by {owner}")
                _into[preset] = budget

            if self._called(caller, register, name, distribution, version):
                presets.update(collected)
                owners.update(dict.fromkeys(collected, distribution))
        return presets


def _type(exc: BaseException) -> str:
    return type(exc).__name__


class _HookTracer:
    """Prints every hook call, its implementations and how it ended (datasette's trace)."""

    def __init__(self) -> None:
        self._started: list[float] = []  # a stack: hooks may call hooks

    def before(
        self, hook_name: str, hook_impls: Sequence[pluggy.HookImpl], kwargs: Mapping[str, Any]
    ) -> None:
        plugins = ", ".join(impl.plugin_name for impl in hook_impls)
        args = ", ".join(f"{key}={value!r}" for key, value in kwargs.items())
        print(f"[hook] {hook_name}({args}) -> [{plugins}]", file=sys.stderr)
        self._started.append(time.perf_counter())

    def after(
        self,
        outcome: pluggy.Result[Any],
        hook_name: str,
        hook_impls: Sequence[pluggy.HookImpl],
        kwargs: Mapping[str, Any],
    ) -> None:
        took = (time.perf_counter() - self._started.pop()) * 1000 if self._started else 0.0
        failed = outcome.exception
        status = f"raised {type(failed).__name__}: {failed}" if failed is not None else "ok"
        print(f"[hook] {hook_name} {status} in {took:.3f} ms", file=sys.stderr)


def _allowed_from(environ: Mapping[str, str]) -> frozenset[str] | None:
    raw = environ.get(LOAD_PLUGINS_VAR)
    if raw is None:
        return None
    return frozenset(normalize_distribution_name(part) for part in raw.split(",") if part.strip())


def create_plugin_manager(
    *,
    strict: bool = False,
    builtins: Sequence[str] = BUILTIN_PLUGINS,
    extra_plugins: Iterable[ModuleType | object] = (),
    load_entry_points: bool = True,
    environ: Mapping[str, str] | None = None,
) -> PluginManager:
    """Build a plugin manager: built-ins, then ``extra_plugins`` (tests, embedders), then every
    allowed entry point, then ``check_pending()``.

    ``environ`` defaults to ``os.environ`` and is read for ``CHATBRIDGE_LOAD_PLUGINS`` and
    ``CHATBRIDGE_TRACE_HOOKS``.
    """
    env = os.environ if environ is None else environ
    trace = env.get(TRACE_HOOKS_VAR, "") not in ("", "0")
    manager = PluginManager(strict=strict, trace=trace)
    manager.load_builtins(builtins)
    for plugin in extra_plugins:
        manager.register(plugin, builtin=False)
    if load_entry_points:
        manager.load_entry_points(allowed=_allowed_from(env))
    manager.pm.check_pending()
    return manager
