"""bridge-slack: the Slack provider plugin for bridge-core, on slack-sdk.

Installed, it registers the provider type ``slack`` through the ``bridge_core`` entry point
(``bridge_slack.plugin``). See ``SlackSettings`` for a profile's settings.

The names that need slack-sdk or aiohttp (``SlackProvider``, ``SlackEvents``, ``escape_slack``)
are imported on first use, so loading the plugin to list providers or check a config does not
import the SDK. ``bridge_slack.testing`` has a fake Slack for tests.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from bridge_slack.error_codes import ERROR_CODES
from bridge_slack.errors import map_error
from bridge_slack.plugin import create_provider, provider_type
from bridge_slack.settings import CAPABILITIES, MAX_LENGTH, SLACK_BUDGET, SlackSettings

if TYPE_CHECKING:
    from bridge_slack.events import SlackEvents
    from bridge_slack.provider import SlackProvider, escape_slack

__all__ = [
    "CAPABILITIES",
    "ERROR_CODES",
    "MAX_LENGTH",
    "SLACK_BUDGET",
    "SlackEvents",
    "SlackProvider",
    "SlackSettings",
    "create_provider",
    "escape_slack",
    "map_error",
    "provider_type",
]

_SDK_NAMES = {
    "SlackEvents": "bridge_slack.events",
    "SlackProvider": "bridge_slack.provider",
    "escape_slack": "bridge_slack.provider",
}


def __getattr__(name: str) -> Any:
    module = _SDK_NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'bridge_slack' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
