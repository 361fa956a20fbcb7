"""The shared provider conformance suite, run against the Slack provider and FakeSlack."""

from __future__ import annotations

import zlib
from typing import Any

import pytest
from bridge_slack import plugin, provider_type
from bridge_slack.testing.fake_slack import FakeSlack, event_callback, message_event, signed_headers

from bridge_core.provider import HttpRequest
from bridge_core.testing import Reply
from bridge_core.testing.conformance import (
    ConformanceHarness,
    Fault,
    Inbound,
    Operation,
    ProviderConformance,
    http_inbound,
)

RETRY_AFTER = 30


class TestSlackConformance(ProviderConformance):
    @pytest.fixture
    def harness(
        self, fake_slack: FakeSlack, slack_settings: dict[str, Any], signing_secret: str
    ) -> ConformanceHarness:
        route_for = {"post": "chat.postMessage", "edit": "chat.update"}
        replies = {
            Fault.RATE_LIMITED: FakeSlack.rate_limited(RETRY_AFTER),
            Fault.NOT_FOUND: FakeSlack.error("message_not_found"),
            Fault.FORBIDDEN: FakeSlack.error("not_in_channel"),
            Fault.UNREACHABLE: FakeSlack.error("token_revoked"),
            Fault.REJECTED: FakeSlack.error("invalid_arguments"),
            Fault.SERVER_ERROR: FakeSlack.server_error(503),
            Fault.DROPPED: Reply.dropped(),
            Fault.SLOW: Reply.slow(3.0),  # past the 0.5 s timeout in slack_settings
        }

        def script_fault(fault: Fault, operation: Operation) -> float | None:
            fake_slack.script(route_for[operation], replies[fault])
            return float(RETRY_AFTER) if fault is Fault.RATE_LIMITED else None

        def inbound_request(kind: Inbound, text: str) -> HttpRequest:
            ts = f"1700000000.{zlib.crc32(text.encode()) % 1_000_000:06d}"  # same text, same ts
            author = {
                Inbound.BOT: {"bot_id": "B0OTHERBOT"},
                Inbound.SELF: {"user": fake_slack.bot_user_id},  # learned through auth.test
            }.get(kind, {})
            event = message_event(channel="C0GENERAL", text=text, ts=ts, **author)
            body = event_callback(event)
            secret = "forged-secret" if kind is Inbound.FORGED else signing_secret
            headers = signed_headers(secret, body)
            return HttpRequest(method="POST", path="/slack/events", headers=headers, body=body)

        return ConformanceHarness(
            provider_type=provider_type(),
            settings=slack_settings,
            channel="C0GENERAL",
            secrets=(fake_slack.token, signing_secret),
            script_fault=script_fault,
            delivered=fake_slack.texts,
            request_count=fake_slack.count,
            extra_pings=(
                "<!channel>",
                "<!here>",
                "<!everyone>",
                "<!here|here>",
                "<@U0SOMEONE>",
                "<!subteam^S0TEAM>",
            ),
            plugin=plugin,
            inbound=http_inbound("POST", "/slack/events", inbound_request),
        )
