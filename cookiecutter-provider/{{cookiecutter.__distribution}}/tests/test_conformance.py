"""The conformance suite every bridge-core provider runs, against the fake API."""

from __future__ import annotations

import pytest
from bridge_core.testing import Reply
from bridge_core.testing.conformance import (
    ConformanceHarness,
    Fault,
    Operation,
    ProviderConformance,
)
from fake_api import CHANNEL, TOKEN, FakeApi, error

import {{ cookiecutter.__package }}.plugin as plugin

ROUTE = {"post": "post_message", "edit": "edit_message"}
RETRY_AFTER = 60.0  # the suite checks the provider answers well before this, never sleeping
# Short, so the slow-answer fault costs little; long enough for a loaded machine's normal calls.
TIMEOUT = 1.5


class Test{{ cookiecutter.__class_prefix }}Conformance(ProviderConformance):
    @pytest.fixture
    def harness(self, fake_api: FakeApi) -> ConformanceHarness:
        def script_fault(fault: Fault, operation: Operation) -> float | None:
            reply = {
                Fault.RATE_LIMITED: error(
                    "rate_limited", 429, headers={"Retry-After": f"{RETRY_AFTER:g}"}
                ),
                Fault.NOT_FOUND: error("message_not_found", 404),
                Fault.FORBIDDEN: error("not_in_channel", 403),
                Fault.UNREACHABLE: error("channel_not_found", 404),
                Fault.REJECTED: error("invalid_request", 400),
                Fault.SERVER_ERROR: error("service_unavailable", 503),
                Fault.DROPPED: Reply.dropped(),
                Fault.SLOW: Reply.slow(TIMEOUT * 4),  # no answer within the provider's timeout
            }[fault]
            fake_api.script(ROUTE[operation], reply)
            return RETRY_AFTER if fault is Fault.RATE_LIMITED else None

        return ConformanceHarness(
            provider_type=plugin.provider_type(),
            settings={"token": TOKEN, "api_base_url": fake_api.api_base, "timeout": TIMEOUT},
            channel=CHANNEL,
            secrets=(TOKEN,),
            script_fault=script_fault,
            delivered=fake_api.texts,
            request_count=fake_api.count,
            plugin=plugin,
        )
