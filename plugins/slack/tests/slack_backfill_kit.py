"""What the Slack read-back tests share (``test_slack_backfill*.py``): the channels and the
person, the core's sink, Socket Mode settings against FakeSlack, a person writing, one
``receive`` run, and the first run that makes channels remembered. Imported by name: the tests
put this folder on ``sys.path``, as ``tests/ledger`` does for its crash harness."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.to_thread
from bridge_slack import SlackProvider, SlackSettings
from bridge_slack.testing.fake_slack import FakeSlack, event_callback, message_event

from bridge_core import InboundMessage
from bridge_core.ledger.kv import MemoryKeyValueStore

CHANNEL = "C0GENERAL"
SECOND = "C0SECOND"
USER = "U0PERSON"
PROFILE = "team"


class Sink:
    """The core's sink; ``hang_on`` names a text whose first delivery never returns (the core
    was taking it when the socket dropped), and which is not taken then."""

    def __init__(self, *, hang_on: str | None = None) -> None:
        self.messages: list[InboundMessage] = []
        self.hung = anyio.Event()
        self.on_message: Callable[[InboundMessage], None] = lambda message: None
        self._hang_on = hang_on
        self._changed = anyio.Event()

    async def __call__(self, message: InboundMessage) -> None:
        if message.text == self._hang_on:
            self._hang_on = None
            self.hung.set()
            await anyio.sleep_forever()
        self.messages.append(message)
        self.on_message(message)
        self._changed.set()

    async def until(self, predicate: Callable[[list[InboundMessage]], bool]) -> None:
        with anyio.fail_after(10):
            while not predicate(self.messages):
                self._changed = anyio.Event()
                await self._changed.wait()

    async def count(self, count: int) -> list[str]:
        await self.until(lambda messages: len(messages) >= count)
        return [m.text for m in self.messages]

    def texts(self, channel: str) -> list[str]:
        return [m.text for m in self.messages if m.channel == channel]


def socket_settings(fake: FakeSlack, **extra: Any) -> SlackSettings:
    return SlackSettings(
        bot_token=fake.token,
        app_token=fake.app_token,
        socket_mode=True,
        api_base_url=fake.api_url,
        timeout=2.0,
        **extra,
    )


def say(fake: FakeSlack, channel: str, text: str, **fields: Any) -> dict[str, Any]:
    """A person writes ``text``: kept in the channel's history; its live event returned."""
    user = fields.pop("user", USER)
    ts = fake.add_foreign_message(channel, text, user=user, **fields)
    return message_event(channel=channel, text=text, user=user, ts=ts, **fields)


def push(fake: FakeSlack, event: dict[str, Any]) -> str:
    return fake.push_event(event_callback(event, event_id=f"Ev{event['ts']}"))


async def in_thread(function: Callable[[], Any]) -> Any:
    return await anyio.to_thread.run_sync(function)


@asynccontextmanager
async def running(
    fake: FakeSlack, settings: SlackSettings, kv: MemoryKeyValueStore | None, sink: Sink
) -> AsyncIterator[SlackProvider]:
    """One Socket Mode ``receive`` run, connected, until the block ends (the provider is then
    gone, as after a deploy)."""
    provider = SlackProvider(settings, profile=PROFILE, kv=kv)
    opened = fake.count("socket")
    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(provider.receive, sink)
            await in_thread(lambda: fake.wait_for_socket(opened + 1))
            yield provider
            tasks.cancel_scope.cancel()
    finally:
        await provider.aclose()


async def first_run(fake: FakeSlack, kv: MemoryKeyValueStore, *channels: str) -> None:
    """A run that hears one person's message in each of ``channels``, in that order, so they
    are remembered, the last one the most recently active."""
    sink = Sink()
    async with running(fake, socket_settings(fake), kv, sink):
        for number, channel in enumerate(channels):
            push(fake, say(fake, channel, f"seen live {number}"))
        await sink.count(len(channels))
