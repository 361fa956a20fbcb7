"""The provider against the real Synapse: the faults the homeserver produces itself, idempotent
creates by transaction id, threads, mentions, probe. Counts and contents are read from the
room's real history."""

from __future__ import annotations

from collections.abc import Callable

import anyio
import pytest
from bridge_matrix import CAPABILITIES, MAX_LENGTH, MatrixProvider, MatrixSettings
from bridge_matrix.inbound import SYNC_NAMESPACE
from bridge_matrix.testing import FaultProxy, ScriptedReply, Synapse
from bridge_matrix.testing.fixtures import MemoryKV, People

from bridge_core import (
    Forbidden,
    InboundMessage,
    MessageRef,
    MessageRejected,
    NotFound,
    RateLimited,
    TransportError,
    Unreachable,
    chunk,
    posting_with_key,
)

pytestmark = pytest.mark.anyio

Settings = Callable[..., MatrixSettings]


async def test_a_real_429_is_raised_at_once_with_the_servers_retry_after(
    synapse: Synapse, people: People, make_settings: Settings, proxy: FaultProxy
) -> None:
    """Synapse's own 429s, counted at the platform side (the proxy forwards everything): one
    request per post, refused or not, so nothing was resent behind the caller's back."""
    throttled = synapse.register()
    room = synapse.create_room(people.person, invite=(throttled,))
    synapse.override_ratelimit(throttled, per_second=1, burst=1)
    refusals: list[RateLimited] = []
    async with MatrixProvider(make_settings(proxy.url, throttled), profile="t") as bot:
        for n in range(6):  # back to back: the join spent the burst already, or a post does
            try:
                await bot.post(room, f"message {n}")
            except RateLimited as error:
                refusals.append(error)
    assert len(refusals) >= 2, "the homeserver never refused: its limit was not met"
    assert [method for method, _ in proxy.requests] == ["PUT"] * 6
    # (That a 429 is raised without a sleep first is the conformance suite's check, with a
    # 30 s retry-after a sleep could not hide in.)
    for error in refusals:
        assert error.retry_after is not None and 0 < error.retry_after <= 1.0
        assert "M_LIMIT_EXCEEDED" in str(error)


async def test_a_proxys_408_or_425_is_transient_and_the_room_stays_usable(
    synapse: Synapse, people: People, make_settings: Settings, proxy: FaultProxy, room: str
) -> None:
    async with MatrixProvider(make_settings(proxy.url, people.bot), profile="t") as bot:
        for status in (408, 425):
            proxy.script("PUT", "/send/", ScriptedReply(status=status, body={}))
            with pytest.raises(TransportError, match=f"HTTP {status}"):
                await bot.post(room, f"refused with {status}")
        await bot.post(room, "the room is fine")
    bodies = [
        e["content"]["body"] for e in synapse.messages_by(people.person, room, people.bot.user_id)
    ]
    assert bodies == ["the room is fine"]


async def test_a_post_into_an_unknown_thread_is_not_found_and_the_room_stays_usable(
    synapse: Synapse, people: People, provider: MatrixProvider, room: str
) -> None:
    """Synapse refuses a relation to a root it does not have; that is the thread gone
    (``NotFound``), not the room (``Unreachable`` would give up a room that works)."""
    with pytest.raises(NotFound, match="thread root"):
        await provider.post(room, "in a thread", thread="$no-such-root")
    await provider.post(room, "plain post to the same room")
    bodies = [
        e["content"]["body"] for e in synapse.messages_by(people.person, room, people.bot.user_id)
    ]
    assert bodies == ["plain post to the same room"]


async def test_a_kicked_bot_reads_as_forbidden_and_probes_false(
    synapse: Synapse, people: People, provider: MatrixProvider, room: str
) -> None:
    ref = await provider.post(room, "before the kick")
    assert await provider.probe(room) is True
    synapse.kick(people.person, room, people.bot)
    with pytest.raises(Forbidden, match="M_FORBIDDEN"):
        await provider.post(room, "after the kick")
    with pytest.raises(Forbidden):
        await provider.edit(ref, "edited after the kick")
    assert await provider.probe(room) is False


async def test_editing_an_unknown_or_redacted_event_is_not_found(
    synapse: Synapse, people: People, make_settings: Settings, room: str
) -> None:
    settings = make_settings(synapse.base_url, people.bot, inbound=True, sync_timeout=1.0)
    kv = MemoryKV()
    position = (SYNC_NAMESPACE, f"{people.bot.user_id}|{people.bot.device_id}")
    async with MatrixProvider(settings, profile="t", kv=kv) as provider:
        # Synapse itself refuses a relation to an event it does not have.
        with pytest.raises(NotFound, match="unknown event"):
            await provider.edit(MessageRef(room, "$unknown-event-id"), "nothing to edit")
        ref = await provider.post(room, "to be redacted")
        redacted = anyio.Event()

        async def sink(message: InboundMessage) -> None:
            if message.text == "after the redaction":
                redacted.set()

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(provider.receive, sink)
            with anyio.fail_after(15):  # the first /sync takes its position before the redaction
                while position not in kv.data:  # noqa: ASYNC110 (the store offers no event)
                    await anyio.sleep(0.02)
            synapse.redact(people.person, room, ref.message_id)
            synapse.send_text(people.person, room, "after the redaction")
            with anyio.fail_after(15):
                await redacted.wait()
            tasks.cancel_scope.cancel()
        # Synapse would accept this edit (and no client would show it): the provider saw the
        # redaction by /sync and refuses without a request.
        with pytest.raises(NotFound, match="redacted"):
            await provider.edit(ref, "edit of a redacted event")
    edits = [
        e
        for e in synapse.history(people.person, room)
        if e.get("content", {}).get("m.relates_to", {}).get("rel_type") == "m.replace"
    ]
    assert edits == [], "no edit may reach the room for a missing or redacted target"


async def test_a_revoked_token_is_unreachable(
    synapse: Synapse, people: People, make_settings: Settings, room: str
) -> None:
    settings = make_settings(synapse.base_url, people.bot, access_token="syt_not_a_real_token")
    async with MatrixProvider(settings, profile="t") as bot:
        with pytest.raises(Unreachable, match="M_UNKNOWN_TOKEN"):
            await bot.post(room, "with a bad token")


async def test_text_json_would_inflate_is_chunked_to_fit_and_edits_fit_too(
    synapse: Synapse, people: People, provider: MatrixProvider, room: str
) -> None:
    before = len(synapse.history(people.person, room))
    with pytest.raises(MessageRejected, match="as sent"):
        await provider.post(room, "\x01" * 20_000)  # 20,000 bytes, 120,000 as JSON escapes
    assert len(synapse.history(people.person, room)) == before
    # Counted as sent (LengthUnit.JSON_UTF8), the core's chunks of it all fit (ADR 0067).
    parts = chunk("\x01" * 20_000, CAPABILITIES.max_length, unit=CAPABILITIES.length_unit)
    for part in parts:
        await provider.post(room, part)
    assert len(synapse.history(people.person, room)) == before + len(parts)
    # An edit to text at the maximum (as sent) fits the event as well.
    at_maximum = "\x02" * (MAX_LENGTH // 6)
    ref = await provider.post(room, "to be edited")
    await provider.edit(ref, at_maximum)
    current = synapse.messages_by(people.person, room, people.bot.user_id)
    assert current[-1]["content"]["body"] == at_maximum


async def test_a_resend_with_the_same_key_returns_the_first_event(
    synapse: Synapse, people: People, make_settings: Settings, room: str
) -> None:
    settings = make_settings(synapse.base_url, people.bot)
    with posting_with_key("obligation-1:0"):
        async with MatrixProvider(settings, profile="t") as first:
            ref = await first.post(room, "the reply")
        # A new process would build a new provider: same token, same device, same key.
        async with MatrixProvider(settings, profile="t") as second:
            again = await second.post(room, "[resent after a crash]\nthe reply")
    with posting_with_key("obligation-1:1"):
        async with MatrixProvider(settings, profile="t") as third:
            part_two = await third.post(room, "the reply, part two")
    assert again.message_id == ref.message_id
    assert part_two.message_id != ref.message_id
    bodies = [
        e["content"]["body"] for e in synapse.messages_by(people.person, room, settings.user_id)
    ]
    assert bodies == ["the reply", "the reply, part two"]


async def test_without_a_key_every_post_is_a_new_message(
    synapse: Synapse, people: People, provider: MatrixProvider, room: str
) -> None:
    one = await provider.post(room, "same words")
    two = await provider.post(room, "same words")
    assert one.message_id != two.message_id


async def test_threads_edits_and_mentions_as_the_homeserver_stores_them(
    synapse: Synapse, people: People, provider: MatrixProvider, room: str
) -> None:
    root = await provider.post(room, provider.escape("status for @room and @alice:bridge.test"))
    reply = await provider.post(room, "in the thread", thread=root.message_id)
    await provider.edit(root, provider.escape("final: @room, see thread"))
    events = {e["event_id"]: e for e in synapse.history(people.person, room)}
    threaded = events[reply.message_id]["content"]["m.relates_to"]
    assert threaded["rel_type"] == "m.thread" and threaded["event_id"] == root.message_id
    for event in events.values():
        if event.get("sender") != people.bot.user_id or event["type"] != "m.room.message":
            continue
        content = event["content"]
        assert content["m.mentions"] == {}, "every event must say it mentions no one"
        assert "@room" not in content["body"]
        assert "formatted_body" not in content
    current = synapse.messages_by(people.person, room, people.bot.user_id)
    assert current[0]["content"]["body"] == "final: @\u200broom, see thread"


async def test_the_transaction_scope_is_the_device_not_the_token(
    synapse: Synapse, people: People, make_settings: Settings, room: str
) -> None:
    """Synapse keys transaction ids by user and device (MSC3970): a new access token for the
    same device (a re-login with ``device_id``) still finds the first event; another device
    does not, and that resend is a second message, which the ledger's marker labels."""
    first_device = make_settings(synapse.base_url, people.bot)
    same_device = synapse.login(people.bot, device_id=people.bot.device_id)
    other_device = synapse.login(people.bot)
    assert other_device.device_id != people.bot.device_id
    with posting_with_key("obligation-window:0"):
        async with MatrixProvider(first_device, profile="t") as bot:
            ref = await bot.post(room, "answer")
        settings = make_settings(synapse.base_url, same_device)
        async with MatrixProvider(settings, profile="t") as bot:
            again = await bot.post(room, "[resent] answer")
        settings = make_settings(synapse.base_url, other_device)
        async with MatrixProvider(settings, profile="t") as bot:
            elsewhere = await bot.post(room, "[resent] answer")
    assert again.message_id == ref.message_id
    assert elsewhere.message_id != ref.message_id
    bodies = [
        e["content"]["body"] for e in synapse.messages_by(people.person, room, people.bot.user_id)
    ]
    assert bodies == ["answer", "[resent] answer"]
