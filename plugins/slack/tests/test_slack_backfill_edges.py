"""The read-back's edges, on the receiver itself with a small in-memory history: a sink that
fails, a held queue that overflows, a read that fails and backs off, positions that never come,
a second ``receive``, and Slack's pagination as documented (a page may hold fewer messages than
asked, even none, while ``next_cursor`` says more follow)."""

from __future__ import annotations

import base64
import dataclasses
import json
from typing import Any

import anyio
import pytest
from bridge_slack import SlackProvider, SlackSettings
from bridge_slack import receiver as receiver_module
from bridge_slack.backfill import NAMESPACE, Positions, read_gap, ts_key
from bridge_slack.receiver import Receiver
from bridge_slack.testing.fake_slack import (
    FakeSlack,
    event_callback,
    message_event,
    signed_headers,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge_core import InboundMessage, TransportError
from bridge_core.ledger.kv import MemoryKeyValueStore
from bridge_core.provider import HttpRequest

pytestmark = pytest.mark.anyio

CHANNEL = "C0GENERAL"
USER = "U0PERSON"
PROFILE = "team"


def ts_of(number: int) -> str:
    return f"1700000000.{number:06d}"


def live_message(number: int, channel: str = CHANNEL) -> InboundMessage:
    ts = ts_of(number)
    return InboundMessage(
        message_id=f"{channel}:{ts}",
        channel=channel,
        author=USER,
        text=f"m{number}",
        at=float(ts),
        platform="slack",
        profile=PROFILE,
    )


class History:
    """``conversations.history`` as Slack documents it: newest first, ``oldest`` exclusive,
    ``limit`` per page (``page_size`` lowers it), an opaque cursor while ``has_more``."""

    def __init__(self) -> None:
        self.messages: dict[str, list[int]] = {}
        self.requests: list[dict[str, Any]] = []
        self.failures = 0  # the next N requests fail as Slack's 5xx does
        self.page_size = 999

    def write(self, number: int, channel: str = CHANNEL) -> None:
        self.messages.setdefault(channel, []).append(number)

    async def __call__(self, channel: str, arguments: dict[str, Any]) -> dict[str, Any]:
        self.requests.append(dict(arguments))
        await anyio.lowlevel.checkpoint()
        if self.failures:
            self.failures -= 1
            raise TransportError("Slack conversations.history failed with HTTP 503")
        floor = ts_key(arguments["oldest"])
        assert floor is not None
        before = None
        if arguments.get("cursor"):
            before = int(base64.b64decode(arguments["cursor"]).decode())
        found = sorted(
            (
                n
                for n in self.messages.get(channel, [])
                if (ts_key(ts_of(n)) or (0, 0)) > floor and (before is None or n < before)
            ),
            reverse=True,
        )
        limit = min(int(arguments.get("limit", 100)), self.page_size)
        page = found[:limit]
        more = len(found) > limit
        cursor = base64.b64encode(str(page[-1]).encode()).decode() if more else ""
        return {
            "ok": True,
            "messages": [
                {"type": "message", "user": USER, "text": f"m{n}", "ts": ts_of(n)} for n in page
            ],
            "has_more": more,
            "response_metadata": {"next_cursor": cursor},
        }


class Sink:
    def __init__(self) -> None:
        self.messages: list[InboundMessage] = []
        self.refuse: set[str] = set()  # texts refused once each
        self._changed = anyio.Event()

    async def __call__(self, message: InboundMessage) -> None:
        await anyio.lowlevel.checkpoint()
        if message.text in self.refuse:
            self.refuse.discard(message.text)
            raise RuntimeError("the core could not store it")
        self.messages.append(message)
        self._changed.set()

    async def count(self, count: int) -> None:
        """Until ``count`` messages are in (or 5 s passed: the assertion after says what is)."""
        with anyio.move_on_after(5):
            while len(self.messages) < count:
                self._changed = anyio.Event()
                await self._changed.wait()

    @property
    def texts(self) -> list[str]:
        return [m.text for m in self.messages]


async def remembered(kv: MemoryKeyValueStore, number: int) -> Positions:
    """Positions that remember CHANNEL at message ``number`` (as a previous run left them)."""
    positions = Positions(kv, profile=PROFILE)
    positions.advance(CHANNEL, ts_of(number), remember=True)
    await positions.flush()
    positions = Positions(kv, profile=PROFILE)
    await positions.load()
    return positions


# ---------------------------------------------------------------------- holding


async def test_live_messages_past_the_held_cap_are_neither_lost_nor_delivered_twice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """More live messages than the held cap arrive while the gap is read: every message is
    delivered once, in order, and the position ends on the newest."""
    monkeypatch.setattr(receiver_module, "HELD_CAP", 3)
    kv = MemoryKeyValueStore()
    positions = await remembered(kv, 1)
    history, sink = History(), Sink()
    history.write(1)
    history.write(2)  # written while down
    gate = anyio.Event()
    reading = anyio.Event()
    plain = history.__call__

    async def held_first_read(channel: str, arguments: dict[str, Any]) -> dict[str, Any]:
        answer = await plain(channel, arguments)  # the read is made now ...
        reading.set()
        await gate.wait()  # ... and answered after the live messages below came
        return answer

    receiver = Receiver(profile=PROFILE, own_ids=lambda: (None, None))
    receiver.start(positions)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(receiver.run, sink, held_first_read)
        await reading.wait()
        for number in range(3, 10):  # seven live messages, cap three
            history.write(number)
            await receiver.live(live_message(number), sink)
        gate.set()
        await sink.count(8)
        await anyio.sleep(0.05)
        tasks.cancel_scope.cancel()
    assert sink.texts == [f"m{n}" for n in range(2, 10)]
    assert positions.get(CHANNEL) == ts_of(9)


# ---------------------------------------------------------------------- positions not loaded


def http_settings(fake: FakeSlack, secret: str) -> SlackSettings:
    return SlackSettings(
        bot_token=fake.token,
        signing_secret=secret,
        api_base_url=fake.api_url,
        bot_user_id=fake.bot_user_id,
        timeout=2.0,
    )


def signed(secret: str, fake: FakeSlack, text: str) -> HttpRequest:
    ts = fake.add_foreign_message("C0GENERAL", text, user=USER)
    event = message_event(channel="C0GENERAL", text=text, user=USER, ts=ts)
    body = event_callback(event, event_id=f"Ev{ts}")
    return HttpRequest(
        method="POST", path="/slack/events", headers=signed_headers(secret, body), body=body
    )


async def test_with_no_receive_an_event_is_answered_within_slacks_3_s_and_later_ones_at_once(
    fake_slack: FakeSlack, signing_secret: str
) -> None:
    """An embedder serves only ``http_routes``: the positions never load. The first event may
    wait for them, but its answer still comes within Slack's 3 s, and later ones do not wait."""
    provider = SlackProvider(
        http_settings(fake_slack, signing_secret), profile=PROFILE, kv=MemoryKeyValueStore()
    )
    sink = Sink()
    [route] = provider.http_routes(sink)
    try:
        with anyio.fail_after(2.5):
            first = await route.handler(signed(signing_secret, fake_slack, "first"))
        with anyio.fail_after(0.5):
            second = await route.handler(signed(signing_secret, fake_slack, "second"))
    finally:
        await provider.aclose()
    assert (first.status, second.status) == (200, 200)
    assert sink.texts == ["first", "second"]


class SlowStore(MemoryKeyValueStore):
    """A store whose reads take ``delay`` seconds (a remote database under load)."""

    delay = 0.0

    async def get(self, namespace: str, key: str) -> bytes | None:
        await anyio.sleep(self.delay)
        return await super().get(namespace, key)


async def test_a_second_receive_holds_live_events_behind_its_read_back_as_the_first_did(
    fake_slack: FakeSlack, signing_secret: str
) -> None:
    """The gateway's watcher gives an embedder's provider ``receive`` again after it ended: a
    live event that comes while that second ``receive`` loads the positions still follows the
    channel's gap."""
    kv = SlowStore()
    provider = SlackProvider(http_settings(fake_slack, signing_secret), profile=PROFILE, kv=kv)
    sink = Sink()
    [route] = provider.http_routes(sink)
    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(provider.receive, sink)
            assert (await route.handler(signed(signing_secret, fake_slack, "seen"))).status == 200
            await sink.count(1)
            tasks.cancel_scope.cancel()
        signed(signing_secret, fake_slack, "while down")  # written, its event never came
        kv.delay = 0.3
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(provider.receive, sink)
            await anyio.sleep(0.05)  # receive is reading the positions
            with anyio.fail_after(2.5):
                live = await route.handler(signed(signing_secret, fake_slack, "live"))
            assert live.status == 200
            await sink.count(3)
            tasks.cancel_scope.cancel()
    finally:
        await provider.aclose()
    assert sink.texts == ["seen", "while down", "live"]


# ---------------------------------------------------------------------- pagination


def scripted(pages: dict[str | None, tuple[list[int], str]]) -> Any:
    """A ``page`` function answering each cursor with its messages and its next cursor."""
    asked: list[str | None] = []

    async def page(arguments: dict[str, Any]) -> dict[str, Any]:
        await anyio.lowlevel.checkpoint()
        cursor = arguments.get("cursor")
        asked.append(cursor)
        numbers, following = pages[cursor]
        return {
            "ok": True,
            "messages": [{"type": "message", "ts": ts_of(n)} for n in numbers],
            "has_more": bool(following),
            "response_metadata": {"next_cursor": following},
        }

    page.asked = asked  # type: ignore[attr-defined]
    return page


async def test_an_empty_page_with_a_next_cursor_does_not_end_the_gap() -> None:
    """Slack: a page may hold fewer results than asked, even when more follow; only
    ``next_cursor`` says whether they do."""
    page = scripted({None: ([5, 4], "a"), "a": ([], "b"), "b": ([3, 2], "")})
    gap, left_unread = await read_gap(page, oldest=ts_of(1), profile=PROFILE, channel=CHANNEL)
    assert [ts for ts, _ in gap] == [ts_of(n) for n in (2, 3, 4, 5)]
    assert not left_unread


async def test_cursors_that_come_round_again_end_the_read() -> None:
    page = scripted({None: ([5], "a"), "a": ([4], "b"), "b": ([3], "a")})
    with anyio.fail_after(2):
        gap, _ = await read_gap(page, oldest=ts_of(1), profile=PROFILE, channel=CHANNEL)
    assert [ts for ts, _ in gap] == [ts_of(n) for n in (3, 4, 5)]
    assert len(page.asked) == 3


async def test_empty_pages_that_never_end_end_the_read_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pages: dict[str | None, tuple[list[int], str]] = {None: ([5], "c0")}
    pages.update({f"c{n}": ([], f"c{n + 1}") for n in range(100)})
    page = scripted(pages)
    gap, left_unread = await read_gap(page, oldest=ts_of(1), profile=PROFILE, channel=CHANNEL)
    assert [ts for ts, _ in gap] == [ts_of(5)]
    assert left_unread
    assert len(page.asked) < 10
    assert any("not delivered" in r.getMessage() for r in caplog.records)


# ---------------------------------------------------------------------- failures


async def test_a_live_message_the_sink_refuses_holds_the_position_until_its_resend_is_taken() -> (
    None
):
    kv = MemoryKeyValueStore()
    positions = await remembered(kv, 1)
    history, sink = History(), Sink()
    receiver = Receiver(profile=PROFILE, own_ids=lambda: (None, None))
    receiver.start(positions)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(receiver.run, sink, history)
        history.write(2)
        await receiver.live(live_message(2), sink)  # held, then handed on after the (empty) gap
        await sink.count(1)
        assert positions.get(CHANNEL) == ts_of(2)
        sink.refuse.add("m3")
        with pytest.raises(RuntimeError):
            await receiver.live(live_message(3), sink)  # unacknowledged: Slack sends it again
        await receiver.live(live_message(4), sink)
        assert positions.get(CHANNEL) == ts_of(2)  # not past m3, which the core has not got
        await receiver.live(live_message(3), sink)  # Slack's resend
        assert positions.get(CHANNEL) == ts_of(4)
        tasks.cancel_scope.cancel()
    assert sink.texts == ["m2", "m4", "m3"]
    stored = Positions(kv, profile=PROFILE)
    await stored.load()
    assert stored.get(CHANNEL) == ts_of(4)


async def test_a_failing_read_backs_off_and_its_held_messages_follow_the_gap_in_order(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(receiver_module, "RETRY_WAIT", 0.05)
    kv = MemoryKeyValueStore()
    positions = await remembered(kv, 1)
    history, sink = History(), Sink()
    history.write(2)  # written while down
    history.failures = 3  # Slack's 5xx, three times
    receiver = Receiver(profile=PROFILE, own_ids=lambda: (None, None))
    receiver.start(positions)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(receiver.run, sink, history)
        for number in (3, 4):
            history.write(number)
            await receiver.live(live_message(number), sink)
        await sink.count(3)
        await receiver.live(live_message(5), sink)  # the lane is open now
        tasks.cancel_scope.cancel()
    assert sink.texts == ["m2", "m3", "m4", "m5"]
    waits = [r.args[2] for r in caplog.records if "trying again" in r.getMessage()]
    assert waits == [0.05, 0.1, 0.2]


async def test_positions_are_written_while_a_failing_channel_backs_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Open channels' progress is written every FLUSH_INTERVAL, not once per back-off (up to
    300 s): a crash meanwhile would read it all back again."""
    monkeypatch.setattr(receiver_module, "RETRY_WAIT", 60.0)
    monkeypatch.setattr(receiver_module, "FLUSH_INTERVAL", 0.05)
    kv = MemoryKeyValueStore()
    positions = Positions(kv, profile=PROFILE)
    positions.advance("C0BROKEN", ts_of(1), remember=True)
    positions.advance(CHANNEL, ts_of(1), remember=True)
    await positions.flush()
    positions = Positions(kv, profile=PROFILE)
    await positions.load()
    history, sink = History(), Sink()

    async def broken_too(channel: str, arguments: dict[str, Any]) -> dict[str, Any]:
        if channel == "C0BROKEN":
            raise TransportError("Slack conversations.history failed with HTTP 503")
        return await history(channel, arguments)

    history.failures = 0
    receiver = Receiver(profile=PROFILE, own_ids=lambda: (None, None))
    receiver.start(positions)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(receiver.run, sink, broken_too)
        await receiver.live(live_message(2), sink)
        await sink.count(1)
        await receiver.live(live_message(3), sink)  # CHANNEL's lane is open
        await anyio.sleep(0.3)
        stored = Positions(kv, profile=PROFILE)
        await stored.load()
        tasks.cancel_scope.cancel()
    assert stored.get(CHANNEL) == ts_of(3)


# ---------------------------------------------------------------------- the stored value

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=20,
)
_rows = st.lists(
    st.lists(st.sampled_from(["C0A", "C0B", "", "C 0", 1, None]) | st.text(max_size=5), max_size=3)
    | st.tuples(
        st.sampled_from(["C0A", "C0B", "é", "C0A\n"]),
        st.sampled_from(["1.5", "1700000000.000001", "nan", "1e3", "\uff11.\uff15", "", 1.5, None]),
    ).map(list),
    max_size=5,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    raw=st.binary(max_size=64)
    | _json_values.map(lambda v: json.dumps(v).encode())
    | st.builds(
        lambda v, rows: json.dumps({"v": v, "channels": rows}).encode(),
        st.sampled_from([1, 1.0, True, "1", 2, None]),
        _rows,
    )
)
def test_any_stored_value_loads_or_is_replaced_never_raises(raw: bytes) -> None:
    async def load() -> None:
        kv = MemoryKeyValueStore()
        await kv.put(NAMESPACE, PROFILE, raw)
        positions = Positions(kv, profile=PROFILE)
        await positions.load()
        for channel in positions.channels():
            assert ts_key(positions.get(channel)) is not None

    anyio.run(load)


async def held_thread_reply_then_read(history: History, sink: Sink) -> None:
    """A thread reply (ts 2, in the thread of 1) arrives live and is held while the gap after
    1 is unread; the gap holds channel message 3, which history lists (it lists no replies).
    Returns once the sink took two messages."""
    positions = await remembered(MemoryKeyValueStore(), 1)
    reply = dataclasses.replace(live_message(2), thread=ts_of(1), text="a reply")
    history.write(3)
    receiver = Receiver(profile=PROFILE, own_ids=lambda: (None, None))
    receiver.start(positions)
    await receiver.live(reply, sink)  # held: the channel's gap is not read yet
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(receiver.run, sink, history)
        await sink.count(2)
        tasks.cancel_scope.cancel()


async def test_a_held_thread_reply_older_than_the_newest_read_is_still_handed_on() -> None:
    """``conversations.history`` does not list replies in threads: a held reply is not one the
    read already had just because the read went past its ts."""
    history, sink = History(), Sink()
    await held_thread_reply_then_read(history, sink)
    assert sink.texts == ["m3", "a reply"]


async def test_a_held_reply_the_sink_refused_after_the_gap_went_past_it_is_handed_on_later(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The gap moved the position past the held reply, then the sink refused the reply: the
    channel is read again later from past it, and the reply must not count as one that read
    had (no read lists replies)."""
    monkeypatch.setattr(receiver_module, "RETRY_WAIT", 0.05)
    history, sink = History(), Sink()
    sink.refuse.add("a reply")
    await held_thread_reply_then_read(history, sink)
    assert sink.texts == ["m3", "a reply"]
    assert len(history.requests) == 2  # read again after the refusal
