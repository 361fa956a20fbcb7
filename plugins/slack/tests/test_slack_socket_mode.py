"""Socket Mode inbound against FakeSlack's websocket: acknowledgements after the sink, Slack's
planned rotation, lost connections, refused tokens."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.to_thread
import pytest
from bridge_slack import SlackProvider, SlackSettings
from bridge_slack.testing.fake_slack import FakeSlack, event_callback, message_event
from pydantic import ValidationError

from bridge_core.inbound.watcher import ReconnectWatcher
from bridge_core.provider import ConnectionLost, InboundMessage, Unreachable
from bridge_core.testing import Reply

pytestmark = pytest.mark.anyio

CHANNEL = "C0GENERAL"


class Sink:
    def __init__(self) -> None:
        self.messages: list[InboundMessage] = []
        self.fail_next = False
        self.arrived = anyio.Event()

    async def __call__(self, message: InboundMessage) -> None:
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("store is down")
        self.messages.append(message)
        self.arrived.set()

    async def next(self) -> InboundMessage:
        with anyio.fail_after(5):
            await self.arrived.wait()
        self.arrived = anyio.Event()
        return self.messages[-1]


@pytest.fixture
def socket_settings(slack_settings: dict[str, Any], fake_slack: FakeSlack) -> dict[str, Any]:
    return {**slack_settings, "socket_mode": True, "app_token": fake_slack.app_token}


async def in_thread(function: Callable[[], Any]) -> Any:
    return await anyio.to_thread.run_sync(function)


@asynccontextmanager
async def receiving(provider: SlackProvider, sink: Sink) -> AsyncIterator[list[BaseException]]:
    """Run ``provider.receive(sink)`` in the background; yields where its ending error goes."""
    ended: list[BaseException] = []

    async def run() -> None:
        try:
            await provider.receive(sink)
        except Exception as exc:
            ended.append(exc)

    async with anyio.create_task_group() as group:
        group.start_soon(run)
        yield ended
        group.cancel_scope.cancel()


def test_socket_mode_needs_an_app_token(slack_settings: dict[str, Any]) -> None:
    with pytest.raises(ValidationError, match="app_token"):
        SlackSettings.model_validate({**slack_settings, "socket_mode": True})
    with pytest.raises(ValidationError, match="xapp-"):
        SlackSettings.model_validate(
            {**slack_settings, "socket_mode": True, "app_token": "xoxb-wrong-kind"}
        )


async def test_without_socket_mode_receive_returns_at_once(
    slack_settings: dict[str, Any], fake_slack: FakeSlack
) -> None:
    async with SlackProvider(SlackSettings.model_validate(slack_settings)) as provider:
        with anyio.fail_after(1):
            await provider.receive(Sink())
    assert fake_slack.count("apps.connections.open") == 0


async def test_events_reach_the_sink_and_are_acknowledged_after_it(
    socket_settings: dict[str, Any], fake_slack: FakeSlack
) -> None:
    sink = Sink()
    provider = SlackProvider(SlackSettings.model_validate(socket_settings), profile="ops")
    assert provider.http_routes(sink) == ()  # Socket Mode replaces the HTTP endpoint
    async with provider, receiving(provider, sink):
        await in_thread(fake_slack.wait_for_socket)
        body = event_callback(message_event(channel=CHANNEL, text="hi", ts="1700000009.000100"))
        envelope = fake_slack.push_event(body, retry_attempt=1)
        message = await sink.next()
        assert await in_thread(lambda: fake_slack.socket_acked(envelope))
    assert message.message_id == f"{CHANNEL}:1700000009.000100"
    assert (message.text, message.profile, message.extra["retry_num"]) == ("hi", "ops", 1)
    opened = fake_slack.last("apps.connections.open")
    assert opened.header("Authorization") == f"Bearer {fake_slack.app_token}"


async def test_bot_messages_are_acknowledged_but_never_delivered(
    socket_settings: dict[str, Any], fake_slack: FakeSlack
) -> None:
    sink = Sink()
    provider = SlackProvider(SlackSettings.model_validate(socket_settings))
    async with provider, receiving(provider, sink):
        await in_thread(fake_slack.wait_for_socket)
        from_bot = message_event(channel=CHANNEL, text="b", bot_id="B1")
        bot = fake_slack.push_event(event_callback(from_bot))
        assert await in_thread(lambda: fake_slack.socket_acked(bot))
        person = fake_slack.push_event(event_callback(message_event(channel=CHANNEL, text="p")))
        assert (await sink.next()).text == "p"
        assert await in_thread(lambda: fake_slack.socket_acked(person))
    assert [m.text for m in sink.messages] == ["p"]


async def test_a_failing_sink_leaves_the_envelope_unacknowledged(
    socket_settings: dict[str, Any], fake_slack: FakeSlack, caplog: pytest.LogCaptureFixture
) -> None:
    sink = Sink()
    sink.fail_next = True
    provider = SlackProvider(SlackSettings.model_validate(socket_settings))
    async with provider, receiving(provider, sink) as ended:
        await in_thread(fake_slack.wait_for_socket)
        lost = fake_slack.push_event(event_callback(message_event(channel=CHANNEL, text="x")))
        kept = fake_slack.push_event(event_callback(message_event(channel=CHANNEL, text="y")))
        assert (await sink.next()).text == "y"
        assert await in_thread(lambda: fake_slack.socket_acked(kept))
    assert lost not in fake_slack.socket_acks
    assert ended == []
    assert "redeliver" in caplog.text


async def test_slacks_planned_rotation_reconnects_in_place(
    socket_settings: dict[str, Any], fake_slack: FakeSlack
) -> None:
    sink = Sink()
    provider = SlackProvider(SlackSettings.model_validate(socket_settings))
    async with provider, receiving(provider, sink) as ended:
        await in_thread(fake_slack.wait_for_socket)
        fake_slack.socket_disconnect("refresh_requested")
        await in_thread(lambda: fake_slack.wait_for_socket(2))
        fake_slack.push_event(event_callback(message_event(channel=CHANNEL, text="after")))
        assert (await sink.next()).text == "after"
    assert ended == []
    assert fake_slack.count("apps.connections.open") == 2


async def test_a_dropped_socket_raises_connection_lost(
    socket_settings: dict[str, Any], fake_slack: FakeSlack
) -> None:
    provider = SlackProvider(SlackSettings.model_validate(socket_settings))
    ended: list[BaseException] = []
    done = anyio.Event()

    async def run() -> None:
        try:
            await provider.receive(Sink())
        except ConnectionLost as exc:
            ended.append(exc)
        finally:
            done.set()

    async with provider, anyio.create_task_group() as group:
        group.start_soon(run)
        await in_thread(fake_slack.wait_for_socket)
        fake_slack.socket_drop()
        with anyio.fail_after(5):
            await done.wait()
    assert len(ended) == 1 and "closed unexpectedly" in str(ended[0])
    assert fake_slack.count("apps.connections.open") == 1, "the watcher rebuilds, not receive"


async def test_a_refused_app_token_is_unreachable(
    socket_settings: dict[str, Any], fake_slack: FakeSlack, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    wrong = "xapp-1-not-the-right-one"
    settings = SlackSettings.model_validate({**socket_settings, "app_token": wrong})
    async with SlackProvider(settings) as provider:
        with anyio.fail_after(5), pytest.raises(Unreachable, match="invalid_auth") as caught:
            await provider.receive(Sink())
    assert fake_slack.count("socket") == 0
    assert wrong not in str(caught.value) and wrong not in caplog.text
    assert fake_slack.app_token not in caplog.text


async def test_a_refused_websocket_handshake_is_lost_without_its_ticket(
    socket_settings: dict[str, Any], fake_slack: FakeSlack, caplog: pytest.LogCaptureFixture
) -> None:
    # The URL apps.connections.open hands out carries the connection's ticket in its query,
    # and aiohttp names the URL in a failed handshake's message.
    caplog.set_level(logging.DEBUG)
    fake_slack.script("socket", Reply.json({"error": "nope"}, status=403))
    async with SlackProvider(SlackSettings.model_validate(socket_settings)) as provider:
        with anyio.fail_after(5), pytest.raises(ConnectionLost, match="HTTP 403") as caught:
            await provider.receive(Sink())
    assert fake_slack.count("socket") == 1
    assert "ticket" not in str(caught.value)
    # slack_sdk's own DEBUG lines show every response body; ours never show the ticket.
    ours = [r.getMessage() for r in caplog.records if r.name.startswith(("bridge", "chatbridge"))]
    assert not any("ticket-" in line for line in ours)


async def test_the_cores_watcher_rebuilds_a_dropped_socket_and_dedups_redelivery(
    socket_settings: dict[str, Any], fake_slack: FakeSlack
) -> None:
    sink = Sink()
    built: list[SlackProvider] = []

    async def factory() -> SlackProvider:
        built.append(SlackProvider(SlackSettings.model_validate(socket_settings)))
        return built[-1]

    watcher = ReconnectWatcher(factory, sink, platform="slack", initial_backoff=0.05)
    body = event_callback(message_event(channel=CHANNEL, text="once", ts="1700000010.000100"))
    async with anyio.create_task_group() as group:
        group.start_soon(watcher.run)
        await in_thread(fake_slack.wait_for_socket)
        fake_slack.push_event(body)
        assert (await sink.next()).text == "once"
        fake_slack.socket_drop()
        await in_thread(lambda: fake_slack.wait_for_socket(2))
        fake_slack.push_event(body, retry_attempt=1)  # Slack redelivers over the new socket
        fake_slack.push_event(event_callback(message_event(channel=CHANNEL, text="next")))
        assert (await sink.next()).text == "next"
        group.cancel_scope.cancel()
    for provider in built:
        await provider.aclose()
    assert [m.text for m in sink.messages] == ["once", "next"]
    assert (watcher.reconnects, len(built)) == (1, 2)
