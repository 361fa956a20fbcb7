"""A limited ``/sync`` timeline's gap, read back through ``receive`` from a fake homeserver: the
bounds, the bot's arrival, and a room whose history fails or is refused (what a real server
cannot be made to show cheaply)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from bridge_matrix import MatrixProvider, MatrixSettings
from bridge_matrix.inbound import SYNC_NAMESPACE
from bridge_matrix.testing import FakeHomeserver
from bridge_matrix.testing.fixtures import MemoryKV

from bridge_core import ConnectionLost, InboundMessage, Unreachable
from bridge_core.testing import Reply

pytestmark = pytest.mark.anyio

BOT = "@bot:fake.test"
PERSON = "@alice:fake.test"
ROOM = "!room:fake.test"
OTHER = "!other:fake.test"
TIMELINE = 100  # the provider's /sync filter shows a room's newest 100 events
CAP = 1_000  # the most of one room's gap the provider reads in one /sync


class SavingKV(MemoryKV):
    """The store, telling when the provider saved its position."""

    def __init__(self) -> None:
        super().__init__()
        self.saved = anyio.Event()

    async def put(self, namespace: str, key: str, value: bytes) -> None:
        await super().put(namespace, key, value)
        self.saved.set()


@pytest.fixture
def homeserver() -> Iterator[FakeHomeserver]:
    with FakeHomeserver(user_id=BOT) as fake:
        yield fake


def provider(homeserver: FakeHomeserver, kv: MemoryKV) -> MatrixProvider:
    settings = MatrixSettings.model_validate(
        {
            "homeserver_url": homeserver.base_url,
            "user_id": BOT,
            "access_token": homeserver.access_token,
            "inbound": True,
            "sync_timeout": 5.0,
            "call_deadline": 5.0,
        }
    )
    return MatrixProvider(settings, profile="t", kv=kv)


async def first_start(homeserver: FakeHomeserver) -> SavingKV:
    """A provider's first start: it stores "now" as its position, and everything sent after
    this is what it must deliver when it comes back."""
    kv = SavingKV()

    async def sink(message: InboundMessage) -> None:
        raise AssertionError(f"nothing is delivered on a first start: {message}")

    async with provider(homeserver, kv) as first, anyio.create_task_group() as tasks:
        tasks.start_soon(first.receive, sink)
        with anyio.fail_after(10):
            await kv.saved.wait()
        tasks.cancel_scope.cancel()
    return kv


async def receive_until(homeserver: FakeHomeserver, kv: MemoryKV, *markers: str) -> list[str]:
    """The texts a provider coming back on ``kv`` delivers, up to the last of ``markers``."""
    got: list[str] = []
    waiting = set(markers)
    seen = anyio.Event()

    async def sink(message: InboundMessage) -> None:
        got.append(message.text)
        waiting.discard(message.text)
        if not waiting:
            seen.set()

    async with provider(homeserver, kv) as back, anyio.create_task_group() as tasks:
        tasks.start_soon(back.receive, sink)
        with anyio.fail_after(10):
            await seen.wait()
        tasks.cancel_scope.cancel()
    return got


def send(homeserver: FakeHomeserver, room: str, prefix: str, count: int) -> list[str]:
    texts = [f"{prefix} {n}" for n in range(count)]
    for text in texts:
        homeserver.send_text(room, PERSON, text)
    return texts


def params(request: Any) -> dict[str, str]:
    return {k: v for k, v in request.query.items() if k != "filter"}


async def test_a_gap_is_read_back_oldest_first_before_the_timeline(
    homeserver: FakeHomeserver,
) -> None:
    homeserver.add_room(ROOM)
    kv = await first_start(homeserver)
    since = homeserver.token()
    sent = send(homeserver, ROOM, "while down", 150)
    homeserver.send_text(ROOM, BOT, "the bot's own words")  # never a turn, gap or not
    sent += send(homeserver, ROOM, "after", 120)
    assert await receive_until(homeserver, kv, sent[-1]) == sent
    pages = [params(r) for r in homeserver.requests_to("messages")]
    # The sync showed the newest 100 events; the gap before them is paged back to `since`.
    assert pages[0] == {"dir": "b", "from": "s171", "to": since, "limit": "100"}
    assert pages[1]["from"] == "s71" and pages[1]["to"] == since
    # The second page reached `since` and kept its end; the empty page after it has none.
    assert [p["from"] for p in pages[2:]] == ["s0"]


async def test_a_gap_stops_at_the_bots_arrival(homeserver: FakeHomeserver) -> None:
    homeserver.add_room(ROOM)
    kv = await first_start(homeserver)
    send(homeserver, ROOM, "before the bot", 3)
    homeserver.join(ROOM, BOT, before="invite")
    sent = send(homeserver, ROOM, "after the join", 2 + TIMELINE)
    assert await receive_until(homeserver, kv, sent[-1]) == sent


@pytest.mark.parametrize("end_on_last_page", [True, False], ids=["synapse", "strict-end"])
@pytest.mark.parametrize("gap", [CAP - 1, CAP, CAP + 1])
async def test_the_cap_warns_only_when_events_were_left_unread(
    gap: int, end_on_last_page: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """The page that reaches ``since`` may keep its ``end`` (Synapse leaves it out only of the
    empty page after); a gap of exactly the cap is then read whole, and nothing was left."""
    caplog.set_level(logging.WARNING, logger="bridge_matrix")
    with FakeHomeserver(user_id=BOT, end_on_last_page=end_on_last_page) as homeserver:
        homeserver.add_room(ROOM)
        kv = await first_start(homeserver)
        in_gap = send(homeserver, ROOM, "gap", gap)
        shown = send(homeserver, ROOM, "shown", TIMELINE)
        got = await receive_until(homeserver, kv, shown[-1])
        pages = homeserver.requests_to("messages")
    assert got == in_gap[-CAP:] + shown
    # Ten pages of 100 at most, and past them at most one request for one event.
    assert len(pages) <= 11 and [r.query["limit"] for r in pages[10:]] in ([], ["1"])
    warnings = [r.getMessage() for r in caplog.records if "not delivered" in r.getMessage()]
    if gap > CAP:
        assert len(warnings) == 1 and ROOM in warnings[0], warnings
    else:
        assert warnings == []


async def test_a_page_hidden_from_the_bot_does_not_end_the_gap(
    homeserver: FakeHomeserver,
) -> None:
    """Synapse drops an ignored user's events after reading a page, so a page of them comes
    back empty with an ``end``; the spec says an empty chunk does not end the history."""
    homeserver.add_room(ROOM)
    homeserver.ignore("@spammer:fake.test")
    kv = await first_start(homeserver)
    early = send(homeserver, ROOM, "early", 5)
    for n in range(250):
        homeserver.send_text(ROOM, "@spammer:fake.test", f"spam {n}")
    late = send(homeserver, ROOM, "late", 5 + TIMELINE)
    assert await receive_until(homeserver, kv, late[-1]) == early + late


@pytest.mark.parametrize(
    ("status", "errcode"),
    [
        (403, "M_FORBIDDEN"),  # the spec's one error for /messages: not a member
        (404, "M_NOT_FOUND"),  # a server that no longer knows the room
        (404, None),
        (400, "M_INVALID_PARAM"),  # a token or filter refused: asking again asks the same
        (400, "M_UNRECOGNIZED"),  # a server without the endpoint: live messages still flow
        (405, None),  # a proxy's answer
    ],
)
async def test_a_room_whose_history_is_refused_is_skipped_and_the_others_go_on(
    homeserver: FakeHomeserver,
    status: int,
    errcode: str | None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="bridge_matrix")
    homeserver.add_room(ROOM)
    homeserver.add_room(OTHER)
    kv = await first_start(homeserver)
    lost = send(homeserver, ROOM, "refused gap", 20)  # this room is answered first
    shown = send(homeserver, ROOM, "refused room", TIMELINE)
    other = send(homeserver, OTHER, "other", 30 + TIMELINE)
    homeserver.refuse_history(ROOM, status, errcode, "Room not found")
    got: list[str] = []
    caught_up, later = anyio.Event(), anyio.Event()

    async def sink(message: InboundMessage) -> None:
        got.append(message.text)
        if message.text == other[-1]:
            caught_up.set()
        if message.text == "later in the other room":
            later.set()

    async with provider(homeserver, kv) as back, anyio.create_task_group() as tasks:
        tasks.start_soon(back.receive, sink)
        with anyio.fail_after(10):
            await caught_up.wait()
            # The same connection goes on, in both rooms.
            homeserver.send_text(ROOM, PERSON, "later in the refused room")
            homeserver.send_text(OTHER, PERSON, "later in the other room")
            await later.wait()
        tasks.cancel_scope.cancel()
    assert got == [*shown, *other, "later in the refused room", "later in the other room"]
    assert not set(lost) & set(got)
    warnings = [r.getMessage() for r in caplog.records if "cannot be read" in r.getMessage()]
    assert len(warnings) == 1 and ROOM in warnings[0] and f"HTTP {status}" in warnings[0]


@pytest.mark.parametrize(
    ("reply", "raised"),
    [
        (Reply.json({"errcode": "M_UNKNOWN", "error": "Bad gateway"}, status=502), ConnectionLost),
        (
            Reply.json({"errcode": "M_LIMIT_EXCEEDED", "retry_after_ms": 50}, status=429),
            ConnectionLost,
        ),
        (Reply.dropped(), ConnectionLost),
        (Reply.json({"errcode": "M_UNKNOWN_TOKEN", "error": "revoked"}, status=401), Unreachable),
    ],
    ids=["502", "429", "dropped", "token"],
)
async def test_a_failed_gap_page_stops_receive_and_keeps_the_position(
    homeserver: FakeHomeserver, reply: Reply, raised: type[Exception]
) -> None:
    """A transport failure or rate limit is ``ConnectionLost``: the core's watcher rebuilds the
    provider, which reads the same batch and gap again from the stored position. A refused token
    is ``Unreachable`` (inbound ends, as on ``/sync``)."""
    homeserver.add_room(ROOM)
    kv = await first_start(homeserver)
    stored = dict(kv.data)
    sent = send(homeserver, ROOM, "while down", 10 + TIMELINE)
    homeserver.script("messages", reply)

    async def sink(message: InboundMessage) -> None:
        raise AssertionError(f"nothing is delivered before the gap: {message}")

    async with provider(homeserver, kv) as back:
        with anyio.fail_after(10), pytest.raises(raised):
            await back.receive(sink)
    assert kv.data == stored
    assert await receive_until(homeserver, kv, sent[-1]) == sent


async def test_a_refused_stored_position_starts_again_from_now(
    homeserver: FakeHomeserver, caplog: pytest.LogCaptureFixture
) -> None:
    # Synapse answers 400 "Invalid stream token" for a position it cannot read (another server
    # behind the name, a restored database): asking with it again would fail for ever.
    homeserver.add_room(ROOM)
    homeserver.join(ROOM, BOT)
    kv = SavingKV()
    await kv.put(SYNC_NAMESPACE, f"{BOT}|", b"a position from another server")
    kv.saved = anyio.Event()

    got: list[str] = []
    arrived = anyio.Event()

    async def sink(message: InboundMessage) -> None:
        got.append(message.text)
        arrived.set()

    with caplog.at_level(logging.WARNING, logger="bridge_matrix"):
        async with provider(homeserver, kv) as back, anyio.create_task_group() as tasks:
            tasks.start_soon(back.receive, sink)
            with anyio.fail_after(10):
                await kv.saved.wait()  # the position at "now" replaced the refused one
                homeserver.send_text(ROOM, PERSON, "after the restart")
                await arrived.wait()
            tasks.cancel_scope.cancel()
    assert got == ["after the restart"]
    assert (await kv.get(SYNC_NAMESPACE, f"{BOT}|")) != b"a position from another server"
    assert "refused the stored /sync position" in caplog.text


async def test_a_position_refused_as_soon_as_it_is_handed_out_is_a_lost_connection(
    homeserver: FakeHomeserver,
) -> None:
    # A server that refuses every position (a broken proxy, a filter it rejects) must not send
    # receive round a loop of fresh starts: the watcher's back-off takes over.
    homeserver.add_room(ROOM)
    kv = SavingKV()
    await kv.put(SYNC_NAMESPACE, f"{BOT}|", b"a position from another server")
    refusal = Reply.json({"errcode": "M_UNKNOWN", "error": "Invalid stream token"}, status=400)

    async def sink(message: InboundMessage) -> None:
        raise AssertionError(f"nothing is delivered: {message}")

    async with provider(homeserver, kv) as back:
        # The stored position is refused, "now" is handed out, and then refused too.
        homeserver.script("sync", refusal, Reply.json({"next_batch": "s0"}), refusal)
        with anyio.fail_after(10), pytest.raises(ConnectionLost, match="refused the position"):
            await back.receive(sink)
    assert [r.query.get("since") for r in homeserver.requests_to("sync")] == [
        "a position from another server",
        None,
        "s0",
    ]
