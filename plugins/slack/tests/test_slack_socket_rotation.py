"""Slack's rotation of Socket Mode connections, against FakeSlack: the next connection is opened
while the old one is still read, the old one closed after the new one's hello, and the
disconnects that are not a rotation (``too_many_websockets``, ``link_disabled``) end the session
for the core's watcher instead of reconnecting at once. Requests are counted at the fake."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.to_thread
import pytest
from bridge_slack import SlackProvider, SlackSettings
from bridge_slack.testing.fake_slack import FakeSlack, event_callback, message_event

from bridge_core.inbound.watcher import ReconnectWatcher
from bridge_core.provider import ConnectionLost, InboundMessage, Unreachable
from bridge_core.testing import Reply

pytestmark = pytest.mark.anyio

CHANNEL = "C0GENERAL"


class Sink:
    """Takes every message; one whose text is in ``held`` waits for ``release``."""

    def __init__(self, *, held: frozenset[str] = frozenset()) -> None:
        self.messages: list[InboundMessage] = []
        self.held = held
        self.holding = anyio.Event()
        self.release = anyio.Event()
        self._arrived = anyio.Event()

    async def __call__(self, message: InboundMessage) -> None:
        if message.text in self.held:
            self.holding.set()
            await self.release.wait()
        self.messages.append(message)
        self._arrived.set()
        self._arrived = anyio.Event()

    @property
    def texts(self) -> list[str]:
        return [m.text for m in self.messages]

    async def wait_for(self, *texts: str) -> None:
        with anyio.fail_after(5):
            while not set(texts) <= set(self.texts):
                await self._arrived.wait()


@dataclass
class Running:
    ended: list[BaseException] = field(default_factory=list)
    done: anyio.Event = field(default_factory=anyio.Event)

    async def wait_ended(self) -> BaseException:
        with anyio.fail_after(5):
            await self.done.wait()
        assert len(self.ended) == 1, self.ended
        return self.ended[0]


@pytest.fixture
def rotation_settings(slack_settings: dict[str, Any], fake_slack: FakeSlack) -> dict[str, Any]:
    # timeout is also how long a new socket has to say hello: long enough to hold it in a test
    return {**slack_settings, "socket_mode": True, "app_token": fake_slack.app_token, "timeout": 5}


@asynccontextmanager
async def receiving(settings: dict[str, Any], sink: Sink) -> AsyncIterator[Running]:
    """``receive(sink)`` in the background; leaving the block cancels it."""
    running = Running()
    provider = SlackProvider(SlackSettings.model_validate(settings))

    async def run() -> None:
        try:
            await provider.receive(sink)
        except Exception as exc:
            running.ended.append(exc)
        finally:
            running.done.set()

    async with provider, anyio.create_task_group() as group:
        group.start_soon(run)
        yield running
        group.cancel_scope.cancel()


async def in_thread(function: Callable[[], Any]) -> Any:
    return await anyio.to_thread.run_sync(function)


def ends(fake: FakeSlack) -> list[str]:
    """How the fake's sockets ended, in socket order."""
    return sorted(e for e in fake.socket_log if not e.startswith(("open", "hello")))


def event(text: str, ts: str) -> dict[str, Any]:
    return event_callback(message_event(channel=CHANNEL, text=text, ts=ts))


async def start_rotation(fake: FakeSlack, reason: str = "warning") -> None:
    """Socket 1 is up; Slack says ``disconnect`` on it and keeps it open; socket 2 is opened
    by the client and waits for its hello (``fake.socket_hello(2)``)."""
    await in_thread(fake.wait_for_socket)
    fake.hold_hello = True
    fake.socket_disconnect(reason, close=False, socket=1)
    await in_thread(lambda: fake.wait_for_socket(2))


async def test_an_envelope_on_the_old_socket_after_its_disconnect_is_delivered_and_acked(
    rotation_settings: dict[str, Any], fake_slack: FakeSlack
) -> None:
    sink = Sink()
    async with receiving(rotation_settings, sink) as running:
        await start_rotation(fake_slack)
        late = fake_slack.push_event(event("late", "1700000001.000100"), socket=1)
        await sink.wait_for("late")
        assert await in_thread(lambda: fake_slack.socket_acked(late))
        fake_slack.socket_hello(2)
        await in_thread(lambda: fake_slack.wait_for_log("closed 1 by client"))
    assert running.ended == [], fake_slack.socket_log
    assert fake_slack.count("apps.connections.open") == 2


async def test_an_envelope_on_the_new_socket_during_the_overlap_is_delivered(
    rotation_settings: dict[str, Any], fake_slack: FakeSlack
) -> None:
    sink = Sink(held=frozenset({"slow"}))
    async with receiving(rotation_settings, sink) as running:
        await start_rotation(fake_slack)
        slow = fake_slack.push_event(event("slow", "1700000002.000100"), socket=1)
        with anyio.fail_after(5):
            await sink.holding.wait()  # the old socket's reader has an envelope in hand
        fake_slack.socket_hello(2)
        new = fake_slack.push_event(event("new", "1700000002.000200"), socket=2)
        await sink.wait_for("new")
        assert await in_thread(lambda: fake_slack.socket_acked(new))
        assert fake_slack.socket_connections == 2, "the old socket waits for its envelope"
        sink.release.set()
        await sink.wait_for("slow")
        assert await in_thread(lambda: fake_slack.socket_acked(slow)), "acked on socket 1"
        await in_thread(lambda: fake_slack.wait_for_log("closed 1 by client"))
    assert running.ended == []
    assert sink.texts == ["new", "slow"]


async def test_no_message_is_lost_across_rotations(
    rotation_settings: dict[str, Any], fake_slack: FakeSlack
) -> None:
    """One message in every phase of two rotations (a warning Slack follows through some seconds
    later, and a refresh it closes at once), and one Slack delivers on both sockets: each
    reaches the core once, none needs Slack to redeliver it, every envelope is acknowledged."""
    sink = Sink()
    built: list[SlackProvider] = []

    async def factory() -> SlackProvider:
        built.append(SlackProvider(SlackSettings.model_validate(rotation_settings)))
        return built[-1]

    watcher = ReconnectWatcher(factory, sink, platform="slack")
    sent: list[str] = []
    async with anyio.create_task_group() as group:
        group.start_soon(watcher.run)
        await in_thread(fake_slack.wait_for_socket)
        sent.append(fake_slack.push_event(event("before", "1700000003.000100")))
        await sink.wait_for("before")
        fake_slack.hold_hello = True
        fake_slack.socket_disconnect("warning", close=False, socket=1)
        sent.append(fake_slack.push_event(event("warned", "1700000003.000200"), socket=1))
        await in_thread(lambda: fake_slack.wait_for_socket(2))
        twice = event("twice", "1700000003.000300")
        sent.append(fake_slack.push_event(twice, socket=1))
        sent.append(fake_slack.push_event(twice, retry_attempt=1, socket=1))
        sent.append(fake_slack.push_event(event("connecting", "1700000003.000400"), socket=1))
        await sink.wait_for("warned", "twice", "connecting")
        assert await in_thread(lambda: all(fake_slack.socket_acked(e) for e in sent))
        fake_slack.hold_hello = False
        fake_slack.socket_hello(2)
        sent.append(fake_slack.push_event(event("hello", "1700000003.000500"), socket=2))
        await in_thread(lambda: fake_slack.wait_for_log("closed 1 by client"))
        sent.append(fake_slack.push_event(event("after", "1700000003.000600")))
        await sink.wait_for("hello", "after")
        fake_slack.socket_disconnect("refresh_requested")  # and Slack closes socket 2 at once
        await in_thread(lambda: fake_slack.wait_for_socket(3))
        sent.append(fake_slack.push_event(event("refreshed", "1700000003.000700")))
        await sink.wait_for("refreshed")
        assert await in_thread(lambda: all(fake_slack.socket_acked(e) for e in sent))
        group.cancel_scope.cancel()
    for provider in built:
        await provider.aclose()
    assert sink.texts == [
        "before",
        "warned",
        "twice",
        "connecting",
        "hello",
        "after",
        "refreshed",
    ]
    assert all(m.extra["retry_num"] == 0 for m in sink.messages)
    assert (watcher.reconnects, len(built), watcher.dedup.dropped) == (0, 1, 1)
    assert fake_slack.count("apps.connections.open") == 3
    assert fake_slack.socket_peak == 2


async def test_at_most_two_sockets_are_open_and_the_old_one_closes_after_the_new_hello(
    rotation_settings: dict[str, Any], fake_slack: FakeSlack
) -> None:
    async with receiving(rotation_settings, Sink()) as running:
        await start_rotation(fake_slack, "refresh_requested")
        assert fake_slack.socket_connections == 2, "the old socket is kept until the new hello"
        fake_slack.socket_hello(2)
        await in_thread(lambda: fake_slack.wait_for_log("closed 1 by client"))
        await in_thread(lambda: fake_slack.wait_for_open_sockets(1))
    assert running.ended == []
    assert fake_slack.socket_log[:5] == [
        "open 1",
        "hello 1",
        "open 2",
        "hello 2",
        "closed 1 by client",
    ]
    assert fake_slack.socket_peak == 2
    assert fake_slack.count("apps.connections.open") == 2


async def test_cancelling_during_the_overlap_closes_both_sockets(
    rotation_settings: dict[str, Any], fake_slack: FakeSlack
) -> None:
    async with receiving(rotation_settings, Sink()):
        await start_rotation(fake_slack)
        assert fake_slack.socket_connections == 2
    await in_thread(lambda: fake_slack.wait_for_open_sockets(0))
    assert ends(fake_slack) == ["closed 1 by client", "closed 2 by client"]


async def test_a_new_socket_that_never_says_hello_is_lost_and_both_are_closed(
    rotation_settings: dict[str, Any], fake_slack: FakeSlack
) -> None:
    settings = {**rotation_settings, "timeout": 0.5}
    async with receiving(settings, Sink()) as running:
        await start_rotation(fake_slack)
        lost = await running.wait_ended()
    assert isinstance(lost, ConnectionLost) and "no hello within 0.5 s" in str(lost)
    await in_thread(lambda: fake_slack.wait_for_open_sockets(0))
    assert ends(fake_slack) == ["closed 1 by client", "closed 2 by client"]
    assert fake_slack.count("apps.connections.open") == 2


async def test_the_old_socket_closing_before_the_new_hello_changes_nothing(
    rotation_settings: dict[str, Any], fake_slack: FakeSlack
) -> None:
    sink = Sink()
    async with receiving(rotation_settings, sink) as running:
        await start_rotation(fake_slack)
        fake_slack.socket_close(socket=1)  # Slack's close comes before the new hello
        await in_thread(lambda: fake_slack.wait_for_log("closed 1 by slack"))
        fake_slack.socket_hello(2)
        fake_slack.push_event(event("on two", "1700000004.000100"), socket=2)
        await sink.wait_for("on two")
    assert running.ended == []


@pytest.mark.parametrize(
    ("refusal", "raised"),
    [
        (FakeSlack.error("invalid_auth"), Unreachable),
        (Reply.json({"ok": False}, status=503), ConnectionLost),
    ],
    ids=["refused-token", "slack-down"],
)
async def test_a_failed_next_connection_is_raised_with_the_old_socket_closed(
    rotation_settings: dict[str, Any],
    fake_slack: FakeSlack,
    refusal: Reply,
    raised: type[Exception],
) -> None:
    async with receiving(rotation_settings, Sink()) as running:
        await in_thread(fake_slack.wait_for_socket)
        fake_slack.script("apps.connections.open", refusal)
        fake_slack.socket_disconnect("warning", close=False, socket=1)
        failure = await running.wait_ended()
    assert type(failure) is raised
    await in_thread(lambda: fake_slack.wait_for_open_sockets(0))
    assert fake_slack.socket_log == ["open 1", "hello 1", "closed 1 by client"]
    assert fake_slack.count("apps.connections.open") == 2


async def test_too_many_websockets_ends_the_session_instead_of_reconnecting(
    rotation_settings: dict[str, Any], fake_slack: FakeSlack
) -> None:
    fake_slack.socket_limit = 0  # other processes hold every connection the app may have
    async with receiving(rotation_settings, Sink()) as running:
        lost = await running.wait_ended()
    assert isinstance(lost, ConnectionLost) and "too_many_websockets" in str(lost)
    assert fake_slack.count("apps.connections.open") == 1
    assert fake_slack.count("socket") == 1
    await in_thread(lambda: fake_slack.wait_for_open_sockets(0))


async def test_too_many_websockets_on_the_new_socket_closes_both(
    rotation_settings: dict[str, Any], fake_slack: FakeSlack
) -> None:
    fake_slack.socket_limit = 1  # the app is at its limit when Slack rotates
    async with receiving(rotation_settings, Sink()) as running:
        await in_thread(fake_slack.wait_for_socket)
        fake_slack.socket_disconnect("warning", close=False, socket=1)
        lost = await running.wait_ended()
    assert isinstance(lost, ConnectionLost) and "too_many_websockets" in str(lost)
    await in_thread(lambda: fake_slack.wait_for_open_sockets(0))
    assert fake_slack.count("apps.connections.open") == 2
    assert fake_slack.socket_peak == 2


async def test_link_disabled_ends_the_session_instead_of_reconnecting(
    rotation_settings: dict[str, Any], fake_slack: FakeSlack
) -> None:
    async with receiving(rotation_settings, Sink()) as running:
        await in_thread(fake_slack.wait_for_socket)
        fake_slack.socket_disconnect("link_disabled")
        lost = await running.wait_ended()
    assert isinstance(lost, ConnectionLost) and "link_disabled" in str(lost)
    assert fake_slack.count("apps.connections.open") == 1
