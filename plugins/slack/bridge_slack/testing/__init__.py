"""Test helpers for the Slack provider, reusable by anyone testing against Slack's APIs.

``FakeSlack`` serves Slack's Web API (and a Socket Mode websocket) over real local HTTP, built on
the core's ``bridge_core.testing.FakePlatform``; ``slack_events`` signs Events API requests as
Slack does. ``bridge_slack.testing.fixtures`` offers a running fake as a pytest fixture::

    # conftest.py
    from bridge_slack.testing.fixtures import fake_slack  # noqa: F401  (the fixture)

    def test_something(fake_slack):
        fake_slack.add_channel("C1")
        ...

Importing this package imports aiohttp (the fake's server), never slack-sdk.
"""

from __future__ import annotations

from bridge_slack.testing.fake_slack import (
    SLACK_MAX_TEXT,
    FakeSlack,
    FakeSlackChannel,
    FakeSlackMessage,
)
from bridge_slack.testing.slack_events import event_callback, message_event, signed_headers

__all__ = [
    "SLACK_MAX_TEXT",
    "FakeSlack",
    "FakeSlackChannel",
    "FakeSlackMessage",
    "event_callback",
    "message_event",
    "signed_headers",
]
