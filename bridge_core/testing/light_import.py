"""Prove a provider plugin declares itself without importing its SDK.

The core loads every installed plugin to list providers or check a config; a plugin whose
entry-point module imports its platform SDK makes every ``chatbridge`` command pay for it. The
rule: the plugin module declares name, capabilities, budget and settings model from
a light module, and the factory imports the SDK when it first builds a provider.

``plugin_load_report`` checks that in a fresh interpreter, exactly as the CLI would load the
plugin (its installed entry point, through ``create_plugin_manager``), and then calls the factory
so a test can also see the SDK arrive there, which shows the check can fail::

    report = plugin_load_report("bridge-slack", "slack", {"bot_token": "xoxb-1"})
    assert report.leaked_at_declare(("slack_sdk", "aiohttp")) == []
    assert "slack_sdk" in report.built

Exception hierarchy: none of its own; ``RuntimeError`` (carrying the child's stderr) when the
fresh interpreter could not load the plugin, validate the settings or build the provider.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["PluginLoadReport", "plugin_load_report"]

_CHILD = """
import json, sys
from bridge_core.hookspecs import ProviderContext
from bridge_core.plugins import create_plugin_manager

distribution, name, raw = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
manager = create_plugin_manager(strict=True, environ={"CHATBRIDGE_LOAD_PLUGINS": distribution})
declared_type = manager.providers.get(name)
settings = declared_type.settings_model.model_validate(raw)
declared = sorted(sys.modules)
provider = declared_type.factory(settings, ProviderContext(profile="light-import"))
print(json.dumps({"declared": declared, "built": sorted(sys.modules),
                  "provider": type(provider).__qualname__}))
"""


@dataclass(frozen=True, slots=True)
class PluginLoadReport:
    """Modules loaded once the provider type was declared (and settings validated), and once the
    factory had built a provider; ``provider`` is the built provider's class name."""

    declared: frozenset[str]
    built: frozenset[str]
    provider: str

    def leaked_at_declare(self, packages: Iterable[str]) -> list[str]:
        """Which of ``packages`` (top-level names, e.g. ``"slack_sdk"``) were imported, or had
        a submodule imported, before the factory ran."""
        return sorted(
            package
            for package in packages
            if any(m == package or m.startswith(package + ".") for m in self.declared)
        )


def plugin_load_report(
    distribution: str, provider: str, settings: Mapping[str, Any], *, timeout: float = 60.0
) -> PluginLoadReport:
    """Load only ``distribution``'s plugins in a fresh interpreter, validate ``settings`` with
    ``provider``'s settings model, record ``sys.modules``, build one provider, record again."""
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, distribution, provider, json.dumps(dict(settings))],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"loading {distribution}'s provider {provider!r} in a fresh interpreter failed "
            f"(exit {done.returncode}); is the distribution installed, and are the settings "
            f"valid? Its stderr:\n{done.stderr}"
        )
    found = json.loads(done.stdout.strip().splitlines()[-1])
    return PluginLoadReport(
        declared=frozenset(found["declared"]),
        built=frozenset(found["built"]),
        provider=found["provider"],
    )
