"""bridge_core.testing: the kit for testing bridge-core and its provider plugins.

- ``fake_platform``: ``FakePlatform``, a scriptable fake chat platform over real local HTTP
  (routes, a record of every request, scripted faults: statuses, drops, slow answers); each
  plugin builds its platform's fake on it in its own testing module (``bridge_slack.testing``,
  ``bridge_discord.testing``, ``bridge_teams.testing``, ``bridge_matrix.testing``);
- ``conformance``: ``ProviderConformance``, the suite every provider's tests subclass;
- ``config_docs``: the rule that every config key has a description, for the core's models and
  any plugin's settings (the conformance suite runs it);
- ``pytest_plugin``: fixtures (``start_fake``, ``fake_platform``), loaded automatically through
  the ``pytest11`` entry point wherever bridge-core is installed;
- ``budget``: an independent checker of a transcript against a send budget and edit spacing;
- ``burst``: the seed's scenario B through the real notifier and sender against a provider,
  on a compressed clock, returning what the sender asked of it (``run_scenario_b``);
- ``light_import``: proof that a plugin declares its provider type without importing its SDK
  (``plugin_load_report``);
- ``clock``: virtual time (trio's ``MockClock``) for I/O-free decision logic;
- ``services``: real Redis and PostgreSQL for tests (skip locally, fail under CI);
- ``processes``: a process's children and waiting for processes to end (``/proc``).

Submodules are imported explicitly; importing this package imports nothing else. The names a
plugin's own fake builds on (``FakePlatform``, ``RecordedRequest``, ``Reply``) are importable
from this package too, loaded on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bridge_core.testing.fake_platform import FakePlatform, RecordedRequest, Reply

__all__ = ["FakePlatform", "RecordedRequest", "Reply"]

_LAZY_NAMES = {
    "FakePlatform": "bridge_core.testing.fake_platform",
    "RecordedRequest": "bridge_core.testing.fake_platform",
    "Reply": "bridge_core.testing.fake_platform",
}


def __getattr__(name: str) -> Any:
    module = _LAZY_NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'bridge_core.testing' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
