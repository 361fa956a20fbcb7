"""Inbound through discord.py's real gateway client against FakeDiscord's websocket."""

from __future__ import annotations

from collections.abc import Callable

import anyio
import pytest
from bridge_discord import DiscordProvider, DiscordSettings
from bridge_discord.testing.fake_discord import FakeDiscord

from bridge_core import ConnectionLost, InboundMessage, Unreachable

pytestmark = pytest.mark.anyio

USER = 700_000_000_000_000_042


class Collected:
    def __init__(self) -> None:
        self.messages: list[InboundMessage] = []
        self._arrived = anyio.Event()
        self._want = 0

    async def sink(self, message: InboundMessage) -> None:
        self.messages.append(message)
        if len(self.messages) >= self._want:
            self._arrived.set()

    async def wait_for(self, count: int) -> list[InboundMessage]:
        self._want = count
        if len(self.messages) < count:
            self._arrived = anyio.Event()
            with anyio.fail_after(5.0):
                await self._arrived.wait()
        return self.messages


async def test_gateway_messages_become_inbound(
    fake: FakeDiscord,
    make_settings: Callable[..., DiscordSettings],
    channel: int,
    thread: int,
) -> None:
    collected = Collected()
    provider = DiscordProvider(make_settings(fake, inbound=True), profile="team")
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(provider.receive, collected.sink)
        await anyio.to_thread.run_sync(fake.wait_identified)
        in_channel = fake.emit_message(channel, "hello bridge", author_id=USER)
        in_thread = fake.emit_message(thread, "in a thread", author_id=USER)
        fake.emit_message(channel, "another bot", author_id=USER + 1, bot=True)
        fake.emit_message(channel, "our own echo", author_id=fake.bot_id)
        fake.emit_message(channel, "", author_id=USER, message_type=7)  # a member joined
        fake.emit_message(channel, "via webhook", author_id=USER + 2, webhook=True)
        # Gateway frames arrive in order: once this one is in, every one before it was handled.
        last = fake.emit_message(channel, "last word", author_id=USER)
        messages = await collected.wait_for(3)
        tasks.cancel_scope.cancel()
    await provider.aclose()
    assert [m.message_id for m in messages] == [str(in_channel), str(in_thread), str(last)]
    first, threaded, _ = messages
    assert (first.channel, first.thread, first.author, first.text) == (
        str(channel),
        None,
        str(USER),
        "hello bridge",
    )
    assert not first.author_is_bot and first.platform == "discord" and first.profile == "team"
    assert first.at > 1.7e9  # epoch seconds from the snowflake
    assert (threaded.channel, threaded.thread) == (str(channel), str(thread))
    identify = fake.identify_payloads[0]
    assert identify["intents"] & (1 << 15), "message-content intent requested"


async def test_resumable_close_is_resumed_by_discord_py(
    fake: FakeDiscord, make_settings: Callable[..., DiscordSettings], channel: int
) -> None:
    collected = Collected()
    provider = DiscordProvider(make_settings(fake, inbound=True), profile="p")
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(provider.receive, collected.sink)
        await anyio.to_thread.run_sync(fake.wait_identified)
        await anyio.to_thread.run_sync(fake.close_gateway, 4000)
        await anyio.to_thread.run_sync(fake.wait_resumed)
        after = fake.emit_message(channel, "after the resume", author_id=USER)
        messages = await collected.wait_for(1)
        tasks.cancel_scope.cancel()
    await provider.aclose()
    assert [m.message_id for m in messages] == [str(after)]
    assert fake.resume_payloads[0]["session_id"] == "fake-session"


@pytest.mark.parametrize("fatal_close", [True, False])
async def test_lost_gateway_raises_connection_lost(
    fake: FakeDiscord,
    make_settings: Callable[..., DiscordSettings],
    channel: int,
    fatal_close: bool,
) -> None:
    # discord.py resumes every close but a few fatal codes; a fatal close, or a resume that
    # cannot connect, is a lost connection, and the core's watcher rebuilds.
    provider = DiscordProvider(make_settings(fake, inbound=True), profile="p")

    async def drop() -> None:
        await anyio.to_thread.run_sync(fake.wait_identified)
        if fatal_close:
            await anyio.to_thread.run_sync(fake.close_gateway, 4012)
        else:
            fake.gateway_available = False
            await anyio.to_thread.run_sync(fake.close_gateway, 4000)

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(drop)
        with anyio.fail_after(10), pytest.raises(ConnectionLost):
            await provider.receive(Collected().sink)
    # The provider logs in again for the next post after its gateway went away.
    await provider.post(str(channel), "still sending")
    await provider.aclose()


async def test_disallowed_intent_is_unreachable(
    fake: FakeDiscord, make_settings: Callable[..., DiscordSettings]
) -> None:
    fake.message_content_allowed = False
    provider = DiscordProvider(make_settings(fake, inbound=True), profile="p")
    with anyio.fail_after(10), pytest.raises(Unreachable, match="message-content intent"):
        await provider.receive(Collected().sink)
    await provider.aclose()


async def test_without_inbound_receive_returns_at_once(
    fake: FakeDiscord, make_settings: Callable[..., DiscordSettings]
) -> None:
    provider = DiscordProvider(make_settings(fake), profile="p")
    await provider.receive(Collected().sink)
    assert fake.count() == 0


async def test_token_refused_on_the_gateway_is_unreachable(
    fake: FakeDiscord, make_settings: Callable[..., DiscordSettings]
) -> None:
    provider = DiscordProvider(make_settings(fake, inbound=True), profile="p")
    await provider.probe(str(next(iter(fake.channels))))  # logged in over REST
    fake.token = "revoked-since"  # the gateway now closes with 4004 on IDENTIFY
    with anyio.fail_after(10), pytest.raises(Unreachable, match="token"):
        await provider.receive(Collected().sink)
    await provider.aclose()
