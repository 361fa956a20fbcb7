"""Every Slack call is exactly one request at the platform, under every fault (issue 13).

slack-sdk's ``AsyncWebClient`` resends connection errors by default and, with the rate-limit
handler, sleeps out a 429 inside the call; the provider builds it with ``retry_handlers=[]``
(ADR 0043). Counted at the fake platform, not at the SDK.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from bridge_slack import SlackProvider, SlackSettings
from bridge_slack.testing.fake_slack import FakeSlack

from bridge_core import ProviderError, RateLimited, TransportError
from bridge_core.testing import Reply

pytestmark = pytest.mark.anyio

FAULTS: dict[str, tuple[Callable[[], Reply], type[ProviderError]]] = {
    "429": (lambda: FakeSlack.rate_limited(1), RateLimited),
    "200 ratelimited": (lambda: FakeSlack.error("ratelimited"), RateLimited),
    "500": (lambda: FakeSlack.server_error(500), TransportError),
    "502": (lambda: FakeSlack.server_error(502), TransportError),
    "503": (lambda: FakeSlack.server_error(503), TransportError),
    "504": (lambda: FakeSlack.server_error(504), TransportError),
    "fatal_error": (lambda: FakeSlack.error("fatal_error"), TransportError),
    "dropped": (Reply.dropped, TransportError),
    "slow": (lambda: Reply.slow(3.0), TransportError),
}


@pytest.mark.parametrize("operation", ["post", "edit"])
@pytest.mark.parametrize("fault", list(FAULTS))
async def test_each_call_is_one_request_under_every_fault(
    fake_slack: FakeSlack, slack_settings: dict[str, Any], fault: str, operation: str
) -> None:
    reply, expected = FAULTS[fault]
    route = "chat.postMessage" if operation == "post" else "chat.update"
    settings = SlackSettings.model_validate(slack_settings)
    async with SlackProvider(settings, profile="ops") as provider:
        ref = await provider.post("C0GENERAL", "before")
        fake_slack.script(route, reply(), times=None)  # the platform keeps failing
        before = fake_slack.count(route)
        started = time.monotonic()
        with pytest.raises(expected):
            if operation == "post":
                await provider.post("C0GENERAL", "during")
            else:
                await provider.edit(ref, "during")
        elapsed = time.monotonic() - started
        assert fake_slack.count(route) - before == 1, f"{fault}: the platform saw a resend"
        limit = 3.0 if fault == "slow" else 1.5  # the slow answer waits out the 0.5 s timeout
        assert elapsed < limit, f"{fault}: the call took {elapsed:.2f} s"
