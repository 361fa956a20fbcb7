"""The shared provider conformance suite, run against the Discord provider and FakeDiscord."""

from __future__ import annotations

import pytest
from bridge_discord import plugin, provider_type

from bridge_core.hookspecs import ProviderContext
from bridge_core.testing.conformance import (
    ConformanceHarness,
    Fault,
    Operation,
    ProviderConformance,
)
from bridge_core.testing.fake_discord import FakeDiscord
from bridge_core.testing.fake_platform import Reply

RETRY_AFTER = 60.0  # past discord.py's 30 s floor, so it raises instead of sleeping


class TestDiscordConformance(ProviderConformance):
    @pytest.fixture
    def harness(self, fake: FakeDiscord, channel: int, thread: int) -> ConformanceHarness:
        route_for = {"post": "create_message", "edit": "edit_message"}

        def script_fault(fault: Fault, operation: Operation) -> float | None:
            route = route_for[operation]
            replies = {
                Fault.RATE_LIMITED: FakeDiscord.rate_limited(RETRY_AFTER),
                Fault.NOT_FOUND: FakeDiscord.error(404, 10008, "Unknown Message"),
                Fault.FORBIDDEN: FakeDiscord.error(403, 50013, "Missing Permissions"),
                Fault.UNREACHABLE: FakeDiscord.error(404, 10003, "Unknown Channel"),
                # 503 is not among the statuses discord.py resends, so the test stays quick.
                Fault.SERVER_ERROR: FakeDiscord.error(503, 0, "Service Unavailable"),
                Fault.DROPPED: Reply.dropped(),
                Fault.SLOW: Reply.slow(3.0),
            }
            fake.script(route, replies[fault])
            return RETRY_AFTER if fault is Fault.RATE_LIMITED else None

        def delivered(channel_id: str) -> list[str]:
            return [m["content"] for m in fake.messages_in(int(channel_id))]

        return ConformanceHarness(
            provider_type=provider_type(),
            settings={
                "token": fake.token,
                "api_base_url": fake.api_base,
                "gateway_url": fake.gateway_url,
                "call_deadline": 1.0,
            },
            channel=str(channel),
            context=ProviderContext(profile="conformance"),
            secrets=(fake.token,),
            script_fault=script_fault,
            delivered=delivered,
            request_count=fake.count,
            thread_for=lambda ref: str(thread),
            extra_pings=("@EVERYONE", "@Here"),
            plugin=plugin,
        )
