"""bridge-slack: the Slack provider plugin for bridge-core, on slack-sdk.

Installed, it registers the provider type ``slack`` through the ``bridge_core`` entry point
(``bridge_slack.plugin``). See ``SlackSettings`` for a profile's settings.
"""

from bridge_slack.errors import SLACK_ERRORS, map_slack_error
from bridge_slack.events import SlackEvents
from bridge_slack.plugin import provider_type
from bridge_slack.provider import (
    SLACK_CAPABILITIES,
    SLACK_CHUNK,
    SlackProvider,
    SlackSettings,
    escape_slack,
)

__all__ = [
    "SLACK_CAPABILITIES",
    "SLACK_CHUNK",
    "SLACK_ERRORS",
    "SlackEvents",
    "SlackProvider",
    "SlackSettings",
    "escape_slack",
    "map_slack_error",
    "provider_type",
]
