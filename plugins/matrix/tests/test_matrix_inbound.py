"""Inbound by ``/sync`` against the real Synapse: threads, edits, the stored position across
providers, and the bot kicked."""

from __future__ import annotations

import logging
from collections.abc import Callable

import anyio
import pytest
from bridge_matrix import MatrixProvider, MatrixSettings
from bridge_matrix.inbound import SYNC_NAMESPACE
from bridge_matrix.testing import Synapse
from bridge_matrix.testing.fixtures import MemoryKV, People

from bridge_core import Forbidden, InboundMessage

pytestmark = pytest.mark.anyio

Settings = Callable[..., MatrixSettings]
MARKER = "inbound marker"


async def receive_until_marker(
    provider: MatrixProvider,
    synapse: Synapse,
    people: People,
    room: str,
    *,
    marker: str,
    kv: MemoryKV,
) -> list[InboundMessage]:
    """Run ``receive`` until the person's ``marker`` message arrives; what came before it. The
    marker is sent once the provider has a position (on a first start, what came before that
    is history)."""
    key = (SYNC_NAMESPACE, f"{people.bot.user_id}|{people.bot.device_id}")
    got: list[InboundMessage] = []
    seen = anyio.Event()

    async def sink(message: InboundMessage) -> None:
        if message.text == marker:
            seen.set()
        else:
            got.append(message)

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(provider.receive, sink)
        with anyio.fail_after(15):
            while key not in kv.data:  # noqa: ASYNC110 (the store offers no event)
                await anyio.sleep(0.02)
            synapse.send_text(people.person, room, marker)
            await seen.wait()
        tasks.cancel_scope.cancel()
    return got


async def test_threads_edits_and_the_stored_position(
    synapse: Synapse, people: People, make_settings: Settings, room: str
) -> None:
    kv = MemoryKV()
    settings = make_settings(synapse.base_url, people.bot, inbound=True, sync_timeout=2.0)
    async with MatrixProvider(settings, profile="t", kv=kv) as provider:
        assert await receive_until_marker(provider, synapse, people, room, marker="m0", kv=kv) == []
    position = kv.data[(SYNC_NAMESPACE, f"{people.bot.user_id}|{people.bot.device_id}")]
    # While no provider runs: a thread root, a reply in its thread, an edit, the bot's own post.
    root = synapse.send_text(people.person, room, "root question")
    synapse.send_text(
        people.person,
        room,
        "in the thread",
        content={
            "msgtype": "m.text",
            "body": "in the thread",
            "m.relates_to": {"rel_type": "m.thread", "event_id": root},
        },
    )
    synapse.send_text(
        people.person,
        room,
        "* root question, edited",
        content={
            "msgtype": "m.text",
            "body": "* root question, edited",
            "m.new_content": {"msgtype": "m.text", "body": "root question, edited"},
            "m.relates_to": {"rel_type": "m.replace", "event_id": root},
        },
    )
    synapse.send_text(people.bot, room, "the bot's own words")
    async with MatrixProvider(settings, profile="t", kv=kv) as provider:
        got = await receive_until_marker(provider, synapse, people, room, marker="m1", kv=kv)
    assert kv.data[(SYNC_NAMESPACE, f"{people.bot.user_id}|{people.bot.device_id}")] != position
    assert [(m.text, m.thread) for m in got] == [("root question", None), ("in the thread", root)]
    assert got[0].message_id == root and got[0].channel == room and got[0].platform == "matrix"
    # A third provider on the same store starts after m1: nothing is delivered again.
    async with MatrixProvider(settings, profile="t", kv=kv) as provider:
        assert await receive_until_marker(provider, synapse, people, room, marker="m2", kv=kv) == []


async def test_more_than_a_timeline_while_down_is_read_back_in_order(
    synapse: Synapse, people: People, make_settings: Settings, room: str
) -> None:
    """Past the filter's 100 events Synapse answers a ``limited`` timeline of the newest ones;
    the gap before them is read back with ``/messages`` and delivered first, in order."""
    kv = MemoryKV()
    settings = make_settings(synapse.base_url, people.bot, inbound=True, sync_timeout=2.0)
    async with MatrixProvider(settings, profile="t", kv=kv) as provider:
        assert await receive_until_marker(provider, synapse, people, room, marker="g0", kv=kv) == []
    sent = [f"while down {n}" for n in range(150)]
    for n, text in enumerate(sent):
        synapse.send_text(people.person, room, text)
        if n == 20:  # filtered out of the gap as out of the timeline: not turns
            synapse.send_text(people.bot, room, "the bot's own words")
            synapse.send_text(
                people.other_bot, room, "a notice", content={"msgtype": "m.notice", "body": "n"}
            )
    async with MatrixProvider(settings, profile="t", kv=kv) as provider:
        got = await receive_until_marker(provider, synapse, people, room, marker="g1", kv=kv)
    assert [m.text for m in got] == sent


async def test_a_kick_is_logged_by_sync_and_sends_read_as_forbidden(
    synapse: Synapse,
    people: People,
    make_settings: Settings,
    caplog: pytest.LogCaptureFixture,
) -> None:
    room = synapse.create_room(people.person, invite=(people.bot,))
    other = synapse.create_room(people.person, invite=(people.bot,))
    settings = make_settings(synapse.base_url, people.bot, inbound=True, sync_timeout=2.0)
    caplog.set_level(logging.WARNING, logger="bridge_matrix")
    kv = MemoryKV()
    async with MatrixProvider(settings, profile="t", kv=kv) as provider:
        await receive_until_marker(provider, synapse, people, other, marker="k0", kv=kv)
        synapse.kick(people.person, room, people.bot)
        # Inbound goes on for the rooms the bot is still in.
        await receive_until_marker(provider, synapse, people, other, marker="k1", kv=kv)
        with pytest.raises(Forbidden):
            await provider.post(room, "after the kick")
    kicks = [r.getMessage() for r in caplog.records if "kicked" in r.getMessage()]
    assert len(kicks) == 1 and room in kicks[0] and people.person.user_id in kicks[0], kicks


async def test_a_room_joined_while_receiving_delivers_only_what_came_after_the_join(
    synapse: Synapse, people: People, make_settings: Settings
) -> None:
    """Synapse shows a newly joined room with its recent history (the default visibility,
    "shared", lets the bot read it); what was said before the bot arrived is not a turn."""
    room = synapse.create_room(people.person)  # the bot is not in it yet
    for n in range(5):
        synapse.send_text(people.person, room, f"before the join {n}")
    kv = MemoryKV()
    key = (SYNC_NAMESPACE, f"{people.bot.user_id}|{people.bot.device_id}")
    settings = make_settings(synapse.base_url, people.bot, inbound=True, sync_timeout=2.0)
    got: list[str] = []
    seen = anyio.Event()

    async def sink(message: InboundMessage) -> None:
        if message.text == "j-marker":
            seen.set()
        else:
            got.append(message.text)

    async with MatrixProvider(settings, profile="t", kv=kv) as provider:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(provider.receive, sink)
            with anyio.fail_after(15):
                while key not in kv.data:  # noqa: ASYNC110 (the store offers no event)
                    await anyio.sleep(0.02)
                synapse.invite(people.person, room, people.bot)
                synapse.join(people.bot, room)
                synapse.send_text(people.person, room, "after the join")
                synapse.send_text(people.person, room, "j-marker")
                await seen.wait()
            tasks.cancel_scope.cancel()
    assert got == ["after the join"]
