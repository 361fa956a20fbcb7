"""``inbound_from_json`` (a message read back over REST) against ``inbound_from_message`` (the
same message live, as discord.py parsed it), and under hypothesis: full Unicode, missing and odd
fields, never anything but a message or ``None``."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anyio
import pytest
from bridge_discord import DiscordProvider, DiscordSettings
from bridge_discord.backfill import _ROWS, NAMESPACE, Positions
from bridge_discord.inbound import inbound_from_json, inbound_from_message
from bridge_discord.testing.fake_discord import FakeDiscord
from hypothesis import given
from hypothesis import strategies as st

from bridge_core import InboundMessage
from bridge_core.ledger.kv import MemoryKeyValueStore
from bridge_core.testing.http_fuzz import ANY_TEXT, fuzz_settings, json_values

USER = 700_000_000_000_000_042
FUZZ = fuzz_settings(300)


@pytest.mark.anyio
async def test_a_message_reads_the_same_live_and_read_back(
    fake: FakeDiscord,
    make_settings: Callable[..., DiscordSettings],
    channel: int,
    thread: int,
) -> None:
    live: list[Any] = []
    provider = DiscordProvider(make_settings(fake, inbound=True), profile="team")
    client = await provider._ready_client()
    arrived = anyio.Event()

    async def keep(message: Any) -> None:
        live.append(message)
        if len(live) == 6:
            arrived.set()

    client.message_handler = keep  # the discord.Message itself, as the gateway gave it
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(client.connect)
        await anyio.to_thread.run_sync(fake.wait_identified)
        ids = [
            fake.emit_message(channel, "plain \u00e9\U0001f600", author_id=USER),
            fake.emit_message(thread, "in a thread", author_id=USER),
            fake.emit_message(channel, "a bot", author_id=USER + 1, bot=True),
            fake.emit_message(channel, "webhook", author_id=USER + 2, webhook=True),
            fake.emit_message(channel, "ours", author_id=fake.bot_id),
            fake.emit_message(channel, "", author_id=USER, message_type=7),
        ]
        with anyio.fail_after(5):
            await arrived.wait()
        tasks.cancel_scope.cancel()
    await provider.aclose()
    for message, message_id in zip(live, ids, strict=True):
        assert message.id == message_id
        from_gateway = inbound_from_message(message, profile="team", own_user_id=fake.bot_id)
        stored = dict(fake.messages[message_id])
        stored.pop("member", None)  # REST message objects carry neither member nor guild_id
        stored.pop("guild_id", None)
        read_back = inbound_from_json(
            stored,
            parent_id=str(channel) if message_id == ids[1] else None,
            guild_id=str(fake.guild_id),
            profile="team",
            own_user_id=fake.bot_id,
        )
        assert read_back == from_gateway
        if read_back is not None and from_gateway is not None:
            assert read_back.extra == from_gateway.extra


IDS = st.integers(1, (1 << 64) - 1).map(str) | st.integers() | st.none() | ANY_TEXT
FIELDS = st.fixed_dictionaries(
    {},
    optional={
        "id": IDS,
        "channel_id": IDS,
        "type": st.integers(-2, 30) | st.booleans() | st.none() | ANY_TEXT | json_values(),
        "content": ANY_TEXT | st.none() | st.integers(),
        "webhook_id": IDS,
        "author": st.fixed_dictionaries(
            {},
            optional={
                "id": IDS,
                "username": ANY_TEXT | st.none(),
                "bot": st.booleans() | st.none() | ANY_TEXT,
                "system": st.booleans() | st.none(),
            },
        )
        | json_values(),
    },
)


@FUZZ
@given(data=FIELDS | json_values(), parent=st.none() | IDS.map(str), own=st.none() | st.integers())
def test_any_message_json_reads_as_a_message_or_none(
    data: Any, parent: str | None, own: int | None
) -> None:
    result = inbound_from_json(data, parent_id=parent, guild_id=None, profile="p", own_user_id=own)
    assert result is None or isinstance(result, InboundMessage)
    if result is not None:
        assert result.message_id.isdigit() and result.author.isdigit()
        assert isinstance(result.text, str) and result.at > 0


@FUZZ
@given(raw=st.binary(max_size=200) | json_values().map(lambda v: repr(v).encode()))
def test_any_stored_value_reads_as_positions_or_none(raw: bytes) -> None:
    channels = _ROWS.decode(raw, 500)
    if channels is not None:
        assert _ROWS.decode(_ROWS.encode(channels), 500) == channels


@pytest.mark.anyio
async def test_positions_keep_the_most_recently_active_channels() -> None:
    kv = MemoryKeyValueStore()
    positions = Positions(kv, profile="p", limit=3)
    for channel in (1, 2, 3, 4):
        positions.advance(channel, 10 + channel, remember=True)
    positions.advance(2, 20, remember=True)  # 2 is now the most recent
    positions.advance(9, 99, remember=False)  # a bot's message never makes a channel remembered
    positions.advance(3, 5, remember=True)  # an older id never moves a position back
    await positions.flush()
    again = Positions(kv, profile="p", limit=3)
    await again.load()
    assert [(c, p.after) for c, p in again.channels()] == [(2, 20), (4, 14), (3, 13)]


# Values shaped like the stored format, with any JSON where ids belong, so the decoder's checks
# past json.loads are reached (the bytes above rarely parse); and nesting past the recursion limit.
_ROW = st.lists(IDS | json_values(max_leaves=4), max_size=5) | json_values(max_leaves=4)
_NEAR = st.fixed_dictionaries(
    {"v": st.sampled_from([1, 1.0, True, "1", 2, None]), "channels": st.lists(_ROW, max_size=6)}
).map(lambda value: json.dumps(value).encode())
_DEEP = st.integers(1, 100_000).map(lambda depth: b"[" * depth + b"]" * depth)


@FUZZ
@given(raw=_NEAR | _DEEP | ANY_TEXT.map(lambda text: text.encode("utf-8", "surrogatepass")))
def test_loading_any_stored_value_never_raises(raw: bytes) -> None:
    async def load() -> list[Any]:
        kv = MemoryKeyValueStore()
        await kv.put(NAMESPACE, "p", raw)
        positions = Positions(kv, profile="p")
        await positions.load()
        return positions.channels()

    for channel, position in anyio.run(load):
        assert channel > 0 and position.after > 0
