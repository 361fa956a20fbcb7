"""Messages written while the gateway was down are read back by the next session, through two
``receive`` runs sharing one key-value store, against FakeDiscord's REST history and gateway."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import anyio
import pytest
from bridge_discord import DiscordProvider, DiscordSettings
from bridge_discord.backfill import NAMESPACE, Positions
from bridge_discord.client import BridgeClient
from bridge_discord.testing.fake_discord import DISCORD_EPOCH_MS, FakeDiscord

from bridge_core import ConnectionLost, InboundMessage
from bridge_core.ledger.kv import MemoryKeyValueStore
from bridge_core.testing import Reply

pytestmark = pytest.mark.anyio

USER = 700_000_000_000_000_042
OTHER = 333_333_333_333_333_333  # a channel the first run never heard from
PROFILE = "team"


class Sink:
    def __init__(self) -> None:
        self.messages: list[InboundMessage] = []
        self._changed = anyio.Event()

        self._holds: dict[str, anyio.Event] = {}

    def hold(self, text: str) -> anyio.Event:
        """Keep the message with ``text`` in the sink (after it is counted) until the event."""
        event = self._holds[text] = anyio.Event()
        return event

    async def __call__(self, message: InboundMessage) -> None:
        self.messages.append(message)
        self._changed.set()
        held = self._holds.get(message.text)
        if held is not None:
            await held.wait()

    async def until(self, predicate: Callable[[list[InboundMessage]], bool]) -> None:
        with anyio.fail_after(10):
            while not predicate(self.messages):
                self._changed = anyio.Event()
                await self._changed.wait()

    async def texts(self, count: int) -> list[str]:
        await self.until(lambda messages: len(messages) >= count)
        return [m.text for m in self.messages]


@asynccontextmanager
async def running(
    fake: FakeDiscord, settings: DiscordSettings, kv: MemoryKeyValueStore | None, sink: Sink
) -> AsyncIterator[DiscordProvider]:
    """One ``receive`` run, identified, until the block ends (the provider is then gone, as
    after a deploy or a dropped connection)."""
    provider = DiscordProvider(settings, profile=PROFILE, kv=kv)
    identified = fake.identified_connections
    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(provider.receive, sink)
            await anyio.to_thread.run_sync(lambda: fake.wait_identified(count=identified + 1))
            yield provider
            tasks.cancel_scope.cancel()
    finally:
        await provider.aclose()


@pytest.fixture
def settings(fake: FakeDiscord, make_settings: Callable[..., DiscordSettings]) -> DiscordSettings:
    return make_settings(fake, inbound=True)


async def first_run(
    fake: FakeDiscord, settings: DiscordSettings, kv: MemoryKeyValueStore, *channels: int
) -> None:
    """A run that hears one person's message in each of ``channels``, so they are remembered."""
    sink = Sink()
    async with running(fake, settings, kv, sink):
        for number, channel in enumerate(channels):
            fake.emit_message(channel, f"seen live {number}", author_id=USER)
        await sink.texts(len(channels))


def history_after(fake: FakeDiscord) -> dict[str, str]:
    """The channel and ``after`` of each history read with ``after``, as the fake got them."""
    return {
        r.path.split("/")[-2]: r.query["after"]
        for r in fake.requests_to("list_messages")
        if "after" in r.query
    }


async def test_a_message_sent_while_down_is_delivered_once_before_the_channels_live_ones(
    fake: FakeDiscord, settings: DiscordSettings, channel: int, thread: int
) -> None:
    kv = MemoryKeyValueStore()
    fake.add_channel(OTHER)
    await first_run(fake, settings, kv, channel, thread)
    missed = fake.emit_message(channel, "while down", author_id=USER)
    in_thread = fake.emit_message(thread, "while down, in the thread", author_id=USER)
    fake.emit_message(channel, "a bot while down", author_id=USER + 1, bot=True)

    sink = Sink()
    fake.history_hold = threading.Event()
    try:
        async with running(fake, settings, kv, sink):
            await fake.wait_for_async(1, "list_messages")  # the gap's read has begun
            live = fake.emit_message(channel, "live after the restart", author_id=USER)
            # Frames arrive in order: once OTHER's message is in, the one before it is waiting.
            fake.emit_message(OTHER, "elsewhere", author_id=USER)
            await sink.until(lambda messages: len(messages) >= 1)
            assert [m.text for m in sink.messages] == ["elsewhere"]  # the channel's live one waits
            fake.history_hold.set()
            await sink.texts(4)
    finally:
        fake.history_hold.set()

    by_id = [m.message_id for m in sink.messages]
    assert by_id.count(str(missed)) == 1 and by_id.count(str(in_thread)) == 1
    in_channel = [m.message_id for m in sink.messages if m.channel == str(channel) and not m.thread]
    assert in_channel == [str(missed), str(live)]  # the gap first
    threaded = next(m for m in sink.messages if m.message_id == str(in_thread))
    assert (threaded.channel, threaded.thread) == (str(channel), str(thread))
    assert len(sink.messages) == 4  # "elsewhere", the two missed, the live one; not the bot's
    assert set(history_after(fake)) == {str(channel), str(thread)}


async def test_messages_already_delivered_are_not_read_back_again(
    fake: FakeDiscord, settings: DiscordSettings, channel: int
) -> None:
    kv = MemoryKeyValueStore()
    sink = Sink()
    async with running(fake, settings, kv, sink):
        fake.emit_message(channel, "one", author_id=USER)
        newest = fake.emit_message(channel, "two", author_id=USER)
        await sink.texts(2)
    expected_after = [str(newest)]
    # Two more runs with nothing missed: each asks once, from the newest delivered, gets none.
    for number in range(2):
        again = Sink()
        async with running(fake, settings, kv, again):
            await fake.wait_for_async(number + 1, "list_messages")
            newest = fake.emit_message(channel, f"live {number}", author_id=USER)
            assert await again.texts(1) == [f"live {number}"]
        expected_after.append(str(newest))
    asked = [r.query.get("after") for r in fake.requests_to("list_messages")]
    assert asked == expected_after[:2]


class Said(logging.Handler):
    """Sets ``all_said`` once every one of ``needles`` was in a logged message."""

    def __init__(self, *needles: str) -> None:
        super().__init__(level=logging.DEBUG)
        self._waiting = set(needles)
        self.all_said = anyio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        self._waiting = {needle for needle in self._waiting if needle not in message}
        if not self._waiting:
            self.all_said.set()


async def test_a_gone_or_forbidden_channel_is_skipped_and_the_others_are_read_back(
    fake: FakeDiscord,
    settings: DiscordSettings,
    channel: int,
    thread: int,
) -> None:
    kv = MemoryKeyValueStore()
    gone, hidden = 444_444_444_444_444_444, 555_555_555_555_555_555
    fake.add_channel(gone)
    fake.add_channel(hidden)
    await first_run(fake, settings, kv, gone, hidden, channel)
    for where in (gone, hidden, channel):
        fake.emit_message(where, f"missed in {where}", author_id=USER)
    with fake.lock:
        del fake.channels[gone]  # 404, Unknown Channel (10003)
        fake.channels[hidden].visible = False  # 403, Missing Access (50001)

    sink = Sink()
    said = Said(f"channel {gone} is gone", f"channel {hidden} cannot be read back")
    logger = logging.getLogger("bridge_discord")
    logger.addHandler(said)
    try:
        async with running(fake, settings, kv, sink):
            assert await sink.texts(1) == [f"missed in {channel}"]
            # The answers are read after the fake counts the requests: wait for what they mean.
            with anyio.fail_after(10):
                await said.all_said.wait()
    finally:
        logger.removeHandler(said)
    # The deleted channel is forgotten; the forbidden one is kept for when access comes back.
    async with running(fake, settings, kv, Sink()):
        await fake.wait_for_async(5, "list_messages")
    second_time = [r.path.split("/")[-2] for r in fake.requests_to("list_messages")[3:]]
    assert sorted(second_time) == sorted([str(hidden), str(channel)])


@pytest.mark.parametrize("missed", [999, 1000, 1001])
async def test_a_gap_past_the_cap_warns_only_when_messages_were_left_unread(
    fake: FakeDiscord,
    settings: DiscordSettings,
    channel: int,
    caplog: pytest.LogCaptureFixture,
    missed: int,
) -> None:
    kv = MemoryKeyValueStore()
    await first_run(fake, settings, kv, channel)
    written = [fake.emit_message(channel, f"m{n}", author_id=USER) for n in range(missed)]

    sink = Sink()
    with caplog.at_level(logging.WARNING, logger="bridge_discord"):
        async with running(fake, settings, kv, sink):
            await sink.texts(min(missed, 1000))
            fake.emit_message(channel, "live", author_id=USER)  # after the gap, so it is read
            await sink.texts(min(missed, 1000) + 1)
    delivered = [int(m.message_id) for m in sink.messages[:-1]]
    assert delivered == written[-1000:]  # the newest, oldest first; past the cap the oldest go
    warned = [r for r in caplog.records if "more than" in r.getMessage()]
    assert len(warned) == (1 if missed > 1000 else 0)
    if warned:
        assert str(channel) in warned[0].getMessage()
    # One page with `after`, then at most ten from the newest back and one message more.
    assert fake.count("list_messages") <= 12


async def test_a_rate_limited_read_waits_as_told_and_asks_again(
    fake: FakeDiscord, settings: DiscordSettings, channel: int
) -> None:
    kv = MemoryKeyValueStore()
    await first_run(fake, settings, kv, channel)
    missed = fake.emit_message(channel, "while down", author_id=USER)
    fake.script("list_messages", FakeDiscord.rate_limited(0.2))
    sink = Sink()
    async with running(fake, settings, kv, sink):
        assert await sink.texts(1) == ["while down"]
    first, second = fake.requests_to("list_messages")
    assert second.at - first.at >= 0.2  # waited as Discord said, measured at the platform
    assert sink.messages[0].message_id == str(missed)


def global_429(retry_after: float, marker: str) -> Reply:
    """A 429 for the whole bot that says so only one way: the body's ``global``, the
    ``X-RateLimit-Global`` header or the ``X-RateLimit-Scope`` header."""
    body = {"message": "You are being rate limited.", "retry_after": retry_after}
    headers = {"Via": "1.1 google", "Retry-After": f"{retry_after:g}"}
    body["global"] = marker == "body"
    headers["X-RateLimit-Scope"] = "global" if marker == "scope" else "user"
    if marker == "header":
        headers["X-RateLimit-Global"] = "true"
    return Reply.json(body, status=429, headers=headers)


@pytest.mark.parametrize("marker", ["body", "header", "scope"])
async def test_a_global_429_holds_every_channels_read_until_it_has_passed(
    fake: FakeDiscord, settings: DiscordSettings, channel: int, thread: int, marker: str
) -> None:
    # Four channels are read at once. The first read meets a 429 for the whole bot, the other
    # three one for their own route, shorter: none may ask again before the global one has
    # passed, or each meets more 429s (Discord bans an IP after 10,000 invalid requests in 10
    # minutes).
    kv = MemoryKeyValueStore()
    fourth = 444_444_444_444_444_444
    fake.add_channel(OTHER)
    fake.add_channel(fourth)
    channels = (channel, thread, OTHER, fourth)
    await first_run(fake, settings, kv, *channels)
    for where in channels:
        fake.emit_message(where, f"missed in {where}", author_id=USER)
    whole_bot, own_route = 0.6, 0.2
    fake.script("list_messages", global_429(whole_bot, marker), *[fake.rate_limited(own_route)] * 3)
    sink = Sink()
    async with running(fake, settings, kv, sink):
        await sink.texts(4)
    reads = fake.requests_to("list_messages")
    limited_at = reads[0].at  # the first to arrive got the global 429
    early = [r.path for r in reads if r.at < limited_at + whole_bot]
    assert len(early) == 4  # each channel's first read, all sent before the answer came
    assert len(reads) == 8  # then one more each, once the global limit had passed
    assert sorted(m.text for m in sink.messages) == sorted(f"missed in {c}" for c in channels)


def written_ago(seconds: float) -> int:
    """The id Discord gives a message written ``seconds`` ago."""
    return (int((time.time() - seconds) * 1000) - DISCORD_EPOCH_MS) << 22


async def test_an_empty_read_of_a_channel_with_newer_messages_warns_of_read_message_history(
    fake: FakeDiscord, settings: DiscordSettings, channel: int, caplog: pytest.LogCaptureFixture
) -> None:
    # Without Read Message History, Discord answers the read with an empty list, not an error;
    # the channel's newest message id (GET /channels/{id}) says that messages were missed.
    kv = MemoryKeyValueStore()
    seen, missed = written_ago(60), written_ago(30)  # well before the read: not just written
    sink = Sink()
    async with running(fake, settings, kv, sink):
        fake.emit_message(channel, "seen live", author_id=USER, message_id=seen)
        await sink.texts(1)
    fake.emit_message(channel, "while down", author_id=USER, message_id=missed)
    fake.channels[channel].read_history = False
    said = Said("Read Message History")
    logging.getLogger("bridge_discord").addHandler(said)
    sink = Sink()
    try:
        with caplog.at_level(logging.WARNING, logger="bridge_discord"):
            async with running(fake, settings, kv, sink):
                with anyio.fail_after(10):
                    await said.all_said.wait()
                fake.emit_message(channel, "live", author_id=USER)
                assert await sink.texts(1) == ["live"]  # the read-back is over
    finally:
        logging.getLogger("bridge_discord").removeHandler(said)
    warned = [r.getMessage() for r in caplog.records if "Read Message History" in r.getMessage()]
    assert len(warned) == 1 and str(channel) in warned[0]
    assert fake.count("get_channel") == 1


@pytest.mark.parametrize("newest", ["the position", "written as the channel was read"])
async def test_an_empty_read_warns_of_nothing_when_no_message_before_it_was_missed(
    fake: FakeDiscord,
    settings: DiscordSettings,
    channel: int,
    caplog: pytest.LogCaptureFixture,
    newest: str,
) -> None:
    # A channel with nothing missed reads empty too, with or without the permission. A message
    # written between the read and the channel's answer is newer than the position but may
    # have come after the read, so it says nothing (it comes live).
    kv = MemoryKeyValueStore()
    await first_run(fake, settings, kv, channel)
    if newest != "the position":
        after_the_read = {"last_message_id": str(written_ago(-1))}
        fake.script("get_channel", Reply.json(fake.channels[channel].to_json() | after_the_read))
    sink = Sink()
    with caplog.at_level(logging.WARNING, logger="bridge_discord"):
        async with running(fake, settings, kv, sink):
            await fake.wait_for_async(1, "get_channel")
            fake.emit_message(channel, "live", author_id=USER)
            assert await sink.texts(1) == ["live"]  # after the read-back
    assert "Read Message History" not in caplog.text
    assert (fake.count("list_messages"), fake.count("get_channel")) == (1, 1)


async def test_the_channel_check_holds_no_live_message_and_its_failure_ends_only_the_checks(
    fake: FakeDiscord, settings: DiscordSettings, channel: int
) -> None:
    # The check after an empty read runs once every lane is open, so a channel's live messages
    # never wait behind it (a quiet channel reads empty at every READY); it goes through the
    # read's own handling (a 429 waits as told), and a check that fails (a 5xx) ends the
    # checks, not the run.
    kv = MemoryKeyValueStore()
    await first_run(fake, settings, kv, channel)
    fake.script("get_channel", fake.rate_limited(1.0), fake.error(502, 0, "Bad Gateway"))
    sink = Sink()
    async with running(fake, settings, kv, sink):
        await fake.wait_for_async(1, "get_channel")
        fake.emit_message(channel, "live", author_id=USER)
        assert await sink.texts(1) == ["live"]
        assert fake.count("get_channel") == 1  # delivered while the check waited out its 429
        await fake.wait_for_async(2, "get_channel")
        fake.emit_message(channel, "still live", author_id=USER)
        assert await sink.texts(2) == ["live", "still live"]  # the 502 did not end the run
    first, second = fake.requests_to("get_channel")
    assert second.at - first.at >= 1.0
    assert fake.count("get_channel") == 2  # not asked again after it failed


async def test_a_server_error_ends_the_run_and_the_next_reads_from_the_same_place(
    fake: FakeDiscord, settings: DiscordSettings, channel: int
) -> None:
    kv = MemoryKeyValueStore()
    await first_run(fake, settings, kv, channel)
    fake.emit_message(channel, "while down", author_id=USER)
    fake.script("list_messages", FakeDiscord.error(502, 0, "Bad Gateway"))
    provider = DiscordProvider(settings, profile=PROFILE, kv=kv)
    with anyio.fail_after(10), pytest.raises(ConnectionLost, match=r"Bad Gateway|server error"):
        await provider.receive(Sink())
    await provider.aclose()
    sink = Sink()
    async with running(fake, settings, kv, sink):
        assert await sink.texts(1) == ["while down"]
    first, second = fake.requests_to("list_messages")
    assert first.query["after"] == second.query["after"]


async def test_a_corrupt_stored_value_does_not_stop_inbound_and_is_replaced(
    fake: FakeDiscord,
    settings: DiscordSettings,
    channel: int,
    caplog: pytest.LogCaptureFixture,
) -> None:
    kv = MemoryKeyValueStore()
    await kv.put(NAMESPACE, PROFILE, b'{"v": 1, "channels": [["not a snowflake", "1", null]]}')
    sink = Sink()
    with caplog.at_level(logging.WARNING, logger="bridge_discord"):
        async with running(fake, settings, kv, sink):
            live = fake.emit_message(channel, "still heard", author_id=USER)
            assert await sink.texts(1) == ["still heard"]
    assert "not readable" in caplog.text
    stored = json.loads(await kv.get(NAMESPACE, PROFILE) or b"")
    assert stored == {"v": 1, "channels": [[str(channel), str(live), None, str(fake.guild_id)]]}


async def test_without_a_store_there_is_no_backfill_and_each_provider_says_so(
    fake: FakeDiscord,
    settings: DiscordSettings,
    channel: int,
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="bridge_discord"):
        for number in range(2):
            sink = Sink()
            async with running(fake, settings, None, sink):
                fake.emit_message(channel, f"live {number}", author_id=USER)
                assert await sink.texts(1) == [f"live {number}"]
    assert fake.count("list_messages") == 0
    said = [r for r in caplog.records if "no key-value store" in r.getMessage()]
    assert len(said) == 2  # one a provider built: nothing is kept at import


async def test_backfill_off_reads_nothing_back(
    fake: FakeDiscord, make_settings: Callable[..., DiscordSettings], channel: int
) -> None:
    settings = make_settings(fake, inbound=True, backfill=False)
    kv = MemoryKeyValueStore()
    await first_run(fake, settings, kv, channel)
    fake.emit_message(channel, "while down", author_id=USER)
    sink = Sink()
    async with running(fake, settings, kv, sink):
        fake.emit_message(channel, "live", author_id=USER)
        assert await sink.texts(1) == ["live"]
    assert fake.count("list_messages") == 0
    assert await kv.get(NAMESPACE, PROFILE) is None


@pytest.fixture
def quick_reidentify(monkeypatch: pytest.MonkeyPatch) -> None:
    """discord.py waits 5 s before IDENTIFYing again after INVALID_SESSION; not in these tests."""

    async def at_once(self: BridgeClient, shard_id: int | None, *, initial: bool = False) -> None:
        return None

    monkeypatch.setattr(BridgeClient, "before_identify_hook", at_once)


async def new_session(fake: FakeDiscord) -> None:
    """INVALID_SESSION on the running connection, and wait for the READY that follows."""
    identified = fake.identified_connections
    fake.invalidate_sessions()
    await anyio.to_thread.run_sync(lambda: fake.wait_identified(count=identified + 1))


@pytest.mark.usefixtures("quick_reidentify")
async def test_a_channel_first_heard_after_a_new_ready_is_not_read_back_over_its_live_messages(
    fake: FakeDiscord, settings: DiscordSettings, channel: int
) -> None:
    # A second READY (INVALID_SESSION) while the first session's gaps are still being read: a
    # channel first heard from after that READY has no gap, only live messages. Reading it
    # "back" from the newest one the core accepted hands the one still in the sink over again.
    kv = MemoryKeyValueStore()
    fake.add_channel(OTHER)
    await first_run(fake, settings, kv, channel)
    sink = Sink()
    in_sink = sink.hold("second")
    fake.history_hold = threading.Event()
    try:
        async with running(fake, settings, kv, sink):
            await fake.wait_for_async(1, "list_messages")  # the first session's read is held
            await new_session(fake)
            first = fake.emit_message(OTHER, "first in a new channel", author_id=USER)
            second = fake.emit_message(OTHER, "second", author_id=USER)
            await sink.until(lambda messages: len(messages) >= 2)  # "second" is in the sink
            fake.history_hold.set()
            await fake.wait_for_async(2, "list_messages")  # the second session's reads
            await anyio.sleep(0.3)  # whatever else they would read
            in_sink.set()
            third = fake.emit_message(OTHER, "third", author_id=USER)
            await sink.until(lambda messages: str(third) in [m.message_id for m in messages])
    finally:
        fake.history_hold.set()
        in_sink.set()
    in_other = [m.message_id for m in sink.messages if m.channel == str(OTHER)]
    assert in_other == [str(first), str(second), str(third)]
    assert set(history_after(fake)) == {str(channel)}


@pytest.mark.usefixtures("quick_reidentify")
async def test_a_channel_forgotten_before_the_next_sessions_read_does_not_hold_its_messages(
    fake: FakeDiscord, settings: DiscordSettings, channel: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Shut at a second READY, then pushed out of the remembered channels by a newer one before
    # that session's reads began: its live messages must not wait for a read that never comes.
    monkeypatch.setitem(Positions.__init__.__kwdefaults__, "limit", 2)
    kv = MemoryKeyValueStore()
    newer, newest = 444_444_444_444_444_444, 555_555_555_555_555_555
    fake.add_channel(newer)
    fake.add_channel(newest)
    await first_run(fake, settings, kv, channel, newer)  # `channel` is the least recent
    sink = Sink()
    fake.history_hold = threading.Event()
    try:
        async with running(fake, settings, kv, sink):
            await fake.wait_for_async(2, "list_messages")
            await new_session(fake)
            fake.emit_message(newest, "pushes the oldest out", author_id=USER)
            await sink.texts(1)
            fake.history_hold.set()
            # The first session's two reads are over once the second session's have begun.
            await fake.wait_for_async(3, "list_messages")
            fake.emit_message(channel, "live in the forgotten channel", author_id=USER)
            await sink.until(lambda messages: len(messages) >= 2)
    finally:
        fake.history_hold.set()
    assert [m.text for m in sink.messages] == [
        "pushes the oldest out",
        "live in the forgotten channel",
    ]


async def test_a_gap_of_more_than_a_page_written_after_ready_is_not_delivered_twice(
    fake: FakeDiscord, settings: DiscordSettings, channel: int
) -> None:
    # Messages written after READY but before the gap's read are in the gap and come live too;
    # every one of them is the gap's, not only the newest page of it.
    kv = MemoryKeyValueStore()
    await first_run(fake, settings, kv, channel)
    missed = fake.emit_message(channel, "while down", author_id=USER)
    sink = Sink()
    fake.history_hold = threading.Event()
    try:
        async with running(fake, settings, kv, sink):
            await fake.wait_for_async(1, "list_messages")
            live = [fake.emit_message(channel, f"live {n}", author_id=USER) for n in range(150)]
            fake.history_hold.set()
            await sink.texts(151)
            after = fake.emit_message(channel, "after the gap", author_id=USER)
            await sink.until(lambda messages: messages[-1].message_id == str(after))
    finally:
        fake.history_hold.set()
    assert [m.message_id for m in sink.messages] == [str(i) for i in (missed, *live, after)]


async def test_reads_keep_to_the_channels_rate_limit_headers_one_request_a_page(
    fake: FakeDiscord, settings: DiscordSettings, channel: int
) -> None:
    # Discord says to read X-RateLimit-Remaining / Reset-After and not hit the limit: a read
    # that drains a channel's bucket waits for its reset before that channel's next page.
    kv = MemoryKeyValueStore()
    await first_run(fake, settings, kv, channel)
    written = [fake.emit_message(channel, f"m{n}", author_id=USER) for n in range(1001)]
    fake.history_limit, fake.history_window = 4, 0.25
    sink = Sink()
    async with running(fake, settings, kv, sink):
        await sink.texts(1000)
    assert [int(m.message_id) for m in sink.messages] == written[-1000:]
    assert fake.rate_limited_history == 0
    assert fake.count("list_messages") == 12  # `after`, ten pages back, one more message
