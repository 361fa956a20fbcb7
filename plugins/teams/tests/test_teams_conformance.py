"""The shared provider conformance suite, run against the Teams provider and FakeTeams."""

from __future__ import annotations

import hashlib
import json

import pytest
from bridge_teams import plugin, provider_type
from bridge_teams.testing.fake_teams import FakeTeams
from cryptography.hazmat.primitives.asymmetric import rsa

from bridge_core import HttpRequest
from bridge_core.hookspecs import ProviderContext
from bridge_core.testing import Reply
from bridge_core.testing.conformance import (
    ConformanceHarness,
    Fault,
    Inbound,
    Operation,
    ProviderConformance,
    http_inbound,
)

RETRY_AFTER = 30.0


class TestTeamsConformance(ProviderConformance):
    @pytest.fixture
    def harness(
        self, fake: FakeTeams, channel: str, foreign_key: rsa.RSAPrivateKey
    ) -> ConformanceHarness:
        route_for = {"post": "send_activity", "edit": "update_activity"}

        def script_fault(fault: Fault, operation: Operation) -> float | None:
            replies = {
                Fault.RATE_LIMITED: FakeTeams.error(429, "Throttled", retry_after=RETRY_AFTER),
                Fault.NOT_FOUND: FakeTeams.error(404, "ActivityNotFoundInConversation"),
                Fault.FORBIDDEN: FakeTeams.error(403, "BotNotInConversationRoster"),
                Fault.UNREACHABLE: FakeTeams.error(403, "BotDisabledByAdmin"),
                Fault.REJECTED: FakeTeams.error(400, "BadArgument"),
                Fault.SERVER_ERROR: FakeTeams.error(503, "ServiceUnavailable"),
                Fault.DROPPED: Reply.dropped(),
                Fault.SLOW: Reply.slow(3.0),
            }
            fake.script(route_for[operation], replies[fault])
            return RETRY_AFTER if fault is Fault.RATE_LIMITED else None

        def make_request(kind: Inbound, text: str) -> HttpRequest:
            # The same text is the same platform message (a redelivery keeps the activity id).
            activity_id = "act-" + hashlib.sha256(text.encode()).hexdigest()[:16]
            activity = fake.message_activity(
                channel,
                text,
                activity_id=activity_id,
                bot_author=kind is Inbound.SELF,
                author_id="28:another-bot" if kind is Inbound.BOT else "29:user-1",
            )
            key = foreign_key if kind is Inbound.FORGED else None
            return HttpRequest(
                method="POST",
                path="/api/teams/messages",
                headers={
                    "Authorization": f"Bearer {fake.channel_token(key=key)}",
                    "Content-Type": "application/json",
                },
                body=json.dumps(activity).encode("utf-8"),
            )

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
            inbound=http_inbound("POST", "/api/teams/messages", make_request),
        )
