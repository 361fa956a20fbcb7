"""The shared provider conformance suite, run against the Teams provider and FakeTeams."""

from __future__ import annotations

import pytest
from bridge_teams import plugin, provider_type

from bridge_core.hookspecs import ProviderContext
from bridge_core.testing.conformance import (
    ConformanceHarness,
    Fault,
    Operation,
    ProviderConformance,
)
from bridge_core.testing.fake_platform import Reply
from bridge_core.testing.fake_teams import FakeTeams

RETRY_AFTER = 30.0


class TestTeamsConformance(ProviderConformance):
    @pytest.fixture
    def harness(self, fake: FakeTeams, channel: str) -> ConformanceHarness:
        route_for = {"post": "send_activity", "edit": "update_activity"}

        def script_fault(fault: Fault, operation: Operation) -> float | None:
            replies = {
                Fault.RATE_LIMITED: FakeTeams.error(429, "Throttled", retry_after=RETRY_AFTER),
                Fault.NOT_FOUND: FakeTeams.error(404, "ActivityNotFoundInConversation"),
                Fault.FORBIDDEN: FakeTeams.error(403, "BotNotInConversationRoster"),
                Fault.UNREACHABLE: FakeTeams.error(403, "BotDisabledByAdmin"),
                Fault.SERVER_ERROR: FakeTeams.error(503, "ServiceUnavailable"),
                Fault.DROPPED: Reply.dropped(),
                Fault.SLOW: Reply.slow(3.0),
            }
            fake.script(route_for[operation], replies[fault])
            return RETRY_AFTER if fault is Fault.RATE_LIMITED else None

        return ConformanceHarness(
            provider_type=provider_type(),
            settings={
                "app_id": fake.app_id,
                "app_password": fake.app_password,
                "service_url": fake.service_url,
                "token_url": fake.token_url,
                "openid_metadata_url": fake.openid_url,
                "call_deadline": 1.0,
            },
            channel=channel,
            context=ProviderContext(profile="conformance"),
            secrets=(fake.app_password,),
            script_fault=script_fault,
            delivered=fake.texts,
            request_count=fake.count,
            extra_pings=("<at>Everyone</at>", "<AT>General</AT>"),
            plugin=plugin,
        )
