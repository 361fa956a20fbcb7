"""A read-back cut short by a Socket Mode drop, and the next ``receive`` of the same provider
(an embedder's provider is given its ``receive`` again after a drop): the channels the cut one
had not finished are read first, and the live messages it held are neither lost nor handed on
twice. Against FakeSlack, its requests counted at the platform."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
from bridge_slack import SlackProvider
from bridge_slack.testing.fake_slack import FakeSlack

from bridge_core import ConnectionLost, InboundMessage
from bridge_core.ledger.kv import MemoryKeyValueStore

sys.path.insert(0, str(Path(__file__).parent))  # the shared kit, by name (its docstring)
from slack_backfill_kit import (
    CHANNEL,
    PROFILE,
    SECOND,
    Sink,
    first_run,
    in_thread,
    push,
    say,
    socket_settings,
)

pytestmark = pytest.mark.anyio

THIRD = "C0THIRD"
FOURTH = "C0FOURTH"


@pytest.fixture
def fake(fake_slack: FakeSlack) -> FakeSlack:
    for channel in (SECOND, THIRD, FOURTH):
        fake_slack.add_channel(channel)
    return fake_slack


class Runs:
    """``receive`` runs of one provider, one after the other, as an embedder's watcher gives
    it after each drop."""

    def __init__(self, fake: FakeSlack, provider: SlackProvider, sink: Sink) -> None:
        self._fake = fake
        self._provider = provider
        self._sink = sink
        self.lost: list[ConnectionLost] = []

    async def until_dropped(self, steps: Callable[[], Any]) -> None:
        """One run, connected; ``steps`` run, then the socket drops and ``receive`` ends."""
        ended = anyio.Event()

        async def run() -> None:
            try:
                await self._provider.receive(self._sink)
            except ConnectionLost as exc:
                self.lost.append(exc)
            finally:
                ended.set()

        opened = self._fake.count("socket")
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(run)
            await in_thread(lambda: self._fake.wait_for_socket(opened + 1))
            await steps()
            self._fake.socket_drop()
            with anyio.fail_after(10):
                await ended.wait()

    async def until_done(self, steps: Callable[[], Any]) -> None:
        """One run, connected, cancelled once ``steps`` are done."""
        opened = self._fake.count("socket")
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self._provider.receive, self._sink)
            await in_thread(lambda: self._fake.wait_for_socket(opened + 1))
            await steps()
            tasks.cancel_scope.cancel()

    async def live_after_the_second_read(self) -> None:
        """Once the second read-back of ``CHANNEL`` is asked for, a live message "live after";
        returns when it is handed on."""
        fake, sink = self._fake, self._sink
        await in_thread(lambda: fake.wait_for(2, "conversations.history"))
        push(fake, say(fake, CHANNEL, "live after"))
        await sink.until(lambda messages: "live after" in [m.text for m in messages])


def history_channels(fake: FakeSlack) -> list[str]:
    return [r.query["channel"] for r in fake.requests_to("conversations.history")]


# ---------------------------------------------------------------------- the order


@pytest.mark.parametrize("drops", [1, 3])
async def test_a_read_back_after_a_drop_goes_first_to_the_channels_the_cut_one_had_not_finished(
    fake: FakeSlack, drops: int
) -> None:
    """Under a limit of one read a minute, a read-back that started over at the most recently
    active channel after every drop would read the first channels again and again and the last
    never. Each run here reads one channel and is cut during the next: the next run starts
    there, and the channels read are read again last (not skipped: a drop may lose messages
    anywhere). Three drops in a row go round in turn; by recency, the channel read in the first
    run would come before those the second had not reached."""
    order = [CHANNEL, SECOND, THIRD, FOURTH]
    kv = MemoryKeyValueStore()
    await first_run(fake, kv, *reversed(order))  # CHANNEL the most recently active
    for channel in order:
        say(fake, channel, f"missed in {channel}")  # Slack gave up on its event
    provider = SlackProvider(socket_settings(fake), profile=PROFILE, kv=kv)
    sink = Sink()
    runs = Runs(fake, provider, sink)
    holds: list[threading.Event] = []

    def hold_after_each_channel(message: InboundMessage) -> None:
        if holds and not holds[-1].is_set():
            fake.history_hold = holds[-1]  # the next channel's read is made, and not answered

    sink.on_message = hold_after_each_channel
    try:
        async with provider:
            for run in range(1, drops + 1):
                holds.append(threading.Event())

                async def cut_during_the_next_channel(requests: int = 2 * run) -> None:
                    await in_thread(lambda: fake.wait_for(requests, "conversations.history"))

                await runs.until_dropped(cut_during_the_next_channel)
                fake.history_hold = None
                holds[-1].set()
                assert history_channels(fake)[2 * run - 2 :] == order[run - 1 : run + 1]
                assert sink.messages[-1].text == f"missed in {order[run - 1]}"

            async def all_read() -> None:
                requests = 2 * drops + len(order)
                await in_thread(lambda: fake.wait_for(requests, "conversations.history"))
                await sink.until(lambda messages: len(messages) == len(order))

            await runs.until_done(all_read)
    finally:
        for hold in holds:
            hold.set()
    assert len(runs.lost) == drops
    assert history_channels(fake)[2 * drops :] == order[drops:] + order[:drops]
    assert [m.text for m in sink.messages] == [f"missed in {channel}" for channel in order]


# ---------------------------------------------------------------------- the held messages


async def test_a_held_thread_reply_of_a_channel_not_yet_read_is_handed_on_after_the_drop(
    fake: FakeSlack,
) -> None:
    """A held message is acknowledged: Slack does not send it again. A channel message is in
    the next read-back anyway; a thread reply is not (history does not list replies), so
    dropping what is held at the drop loses it."""
    kv = MemoryKeyValueStore()
    await first_run(fake, kv, CHANNEL)
    [parent] = [m.ts for m in fake.messages.values() if m.text == "seen live 0"]
    provider = SlackProvider(socket_settings(fake), profile=PROFILE, kv=kv)
    sink = Sink()
    runs = Runs(fake, provider, sink)
    fake.history_hold = threading.Event()  # the channel's read is made, and not answered

    async def reply_while_the_channel_is_read() -> None:
        await in_thread(lambda: fake.wait_for(1, "conversations.history"))
        reply = push(fake, say(fake, CHANNEL, "a reply", thread_ts=parent))
        assert await in_thread(lambda: fake.socket_acked(reply))  # held, acknowledged

    try:
        async with provider:
            await runs.until_dropped(reply_while_the_channel_is_read)
            fake.history_hold.set()
            fake.history_hold = None
            assert sink.messages == []

            await runs.until_done(runs.live_after_the_second_read)
    finally:
        if fake.history_hold is not None:
            fake.history_hold.set()
    assert sink.texts(CHANNEL) == ["a reply", "live after"]


async def test_a_held_reply_whose_read_went_past_it_before_the_drop_is_handed_on_once(
    fake: FakeSlack,
) -> None:
    """The read listed a newer channel message and handed it on (the channel's position is now
    past the reply) when the socket dropped while the core was taking the held reply. The next
    read-back starts after the newer message: the reply is still handed on, and the newer
    message's held live copy is not handed on a second time."""
    kv = MemoryKeyValueStore()
    await first_run(fake, kv, CHANNEL)
    [parent] = [m.ts for m in fake.messages.values() if m.text == "seen live 0"]
    provider = SlackProvider(socket_settings(fake), profile=PROFILE, kv=kv)
    sink = Sink(hang_on="a reply")
    runs = Runs(fake, provider, sink)
    hold = threading.Event()
    fake.history_hold = hold

    async def drop_while_the_reply_is_taken() -> None:
        await in_thread(lambda: fake.wait_for(1, "conversations.history"))
        reply = push(fake, say(fake, CHANNEL, "a reply", thread_ts=parent))
        newer = push(fake, say(fake, CHANNEL, "newer"))
        assert await in_thread(lambda: fake.socket_acked(reply) and fake.socket_acked(newer))
        hold.set()  # the read is answered now: it lists "newer", not the reply
        with anyio.fail_after(10):
            await sink.hung.wait()

    try:
        async with provider:
            await runs.until_dropped(drop_while_the_reply_is_taken)
            fake.history_hold = None
            assert [m.text for m in sink.messages] == ["newer"]

            await runs.until_done(runs.live_after_the_second_read)
    finally:
        hold.set()
    assert sink.texts(CHANNEL) == ["newer", "a reply", "live after"]
