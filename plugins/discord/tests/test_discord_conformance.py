"""The shared provider conformance suite, run against the Discord provider and FakeDiscord."""

from __future__ import annotations

import anyio
import anyio.to_thread
import pytest
from bridge_discord import plugin, provider_type
from bridge_discord.testing.fake_discord import FakeDiscord

from bridge_core import ChatProvider, HttpResponse, InboundMessage, InboundSink, Unreachable
from bridge_core.hookspecs import ProviderContext
from bridge_core.testing import Reply
from bridge_core.testing.conformance import (
    ConformanceHarness,
    Fault,
    Inbound,
    InboundDriver,
    Operation,
    ProviderConformance,
)

RETRY_AFTER = 60.0  # past discord.py's 30 s floor, so it raises instead of sleeping
USER = 700_000_000_000_000_042
MARKER = "conformance marker: every frame before this one was handled"


def gateway_inbound(fake: FakeDiscord, channel: int) -> InboundDriver:
    """Delivers through the provider's real ``receive``: a gateway connection per delivery, the
    message, then a marker message whose arrival proves the one before it was handled."""
    message_ids: dict[str, int] = {}

    async def drive(
        provider: ChatProvider, sink: InboundSink, kind: Inbound, text: str
    ) -> HttpResponse | None:
        if kind is Inbound.FORGED:
            # The gateway authenticates the connection, not each message: a refused token
            # means no message is ever delivered.
            real, fake.token = fake.token, "forged-token"
            try:
                with anyio.fail_after(10), pytest.raises(Unreachable):
                    await provider.receive(sink)
            finally:
                fake.token = real
            return None
        marker_seen = anyio.Event()

        async def forward(message: InboundMessage) -> None:
            if message.text == MARKER:
                marker_seen.set()
            else:
                await sink(message)

        connections = fake.identified_connections
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(provider.receive, forward)
            await anyio.to_thread.run_sync(lambda: fake.wait_identified(count=connections + 1))
            author = {Inbound.USER: USER, Inbound.BOT: USER + 1, Inbound.SELF: fake.bot_id}[kind]
            message_id = message_ids.setdefault(text, fake.snowflake())
            fake.emit_message(
                channel, text, author_id=author, bot=kind is Inbound.BOT, message_id=message_id
            )
            fake.emit_message(channel, MARKER, author_id=USER)
            with anyio.fail_after(5):
                await marker_seen.wait()
            tasks.cancel_scope.cancel()
        return None

    return drive


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
                Fault.REJECTED: FakeDiscord.error(400, 50035, "Invalid Form Body"),
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
                "inbound": True,
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
            inbound=gateway_inbound(fake, channel),
        )
