from __future__ import annotations

from typing import Any

import pytest
from bridge_slack.testing.fake_slack import FakeSlack
from bridge_slack.testing.fixtures import fake_slack

__all__ = ["fake_slack"]

SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"  # Slack's documented example secret


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # slack-sdk's AsyncWebClient runs on aiohttp


@pytest.fixture
def signing_secret() -> str:
    return SIGNING_SECRET


@pytest.fixture
def slack_settings(fake_slack: FakeSlack) -> dict[str, Any]:
    """Settings pointing the real client at the fake, with a short timeout for slow faults."""
    return {
        "bot_token": fake_slack.token,
        "signing_secret": SIGNING_SECRET,
        "api_base_url": fake_slack.api_url,
        "timeout": 0.5,
    }
