"""The SDK matches each answer to the message it answers: by ``re`` (the ``id`` it sent) when the
gateway echoes one, and by turn and an error's text when it does not (an older gateway).

The gateway here is a bare aiohttp WebSocket server written from docs/agent-protocol.md, not the
project's: the test plays it frame by frame, so it can answer in orders and with wordings the
real gateway never produces. Every frame either side sends is checked against the schema."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import pytest
from aiohttp import WSMsgType, web
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from bridge_core.agent import AgentError, Rejected, Session, Turn, connect
from bridge_core.agent import protocol as p

from .conftest import assert_client_message, assert_server_message

TURN = {
    "type": "turn",
    "turn": "ops/1",
    "channel": "ops",
    "conversation": "C1/u/ann",
    "seq": 1,
    "inserted_at": 1.0,
    "message_id": "m1",
    "author": "ann",
    "text": "hi",
    "history": [{"kind": "turn", "seq": 1, "author": "ann", "text": "hi"}],
}


class Peer:
    """One agent connection to the fake gateway: the test reads the agent's frames and sends
    the gateway's."""

    def __init__(self, ws: web.WebSocketResponse, frames: MemoryObjectReceiveStream[Any]) -> None:
        self.ws = ws
        self.frames = frames

    async def recv(self) -> dict[str, Any]:
        with anyio.fail_after(5.0):
            frame: dict[str, Any] = await self.frames.receive()
        return frame

    async def send(self, message: dict[str, Any]) -> None:
        frame = json.dumps(message)
        assert_server_message(frame)
        await self.ws.send_str(frame)

    async def hello(self, *, message_ids: bool) -> None:
        """Answer the agent's hello; ``message_ids=False`` is a gateway from before ids."""
        hello = await self.recv()
        assert hello["type"] == "hello" and "id" not in hello, hello
        answer = {
            "type": "hello",
            "protocol": 1,
            "gateway": "fake",
            "members": {"ops": "support/sdk@fake:1"},
            "since": {"ops": 0.0},
            "concurrency": 1,
            "max_message_bytes": p.MAX_MESSAGE_BYTES,
        }
        await self.send({**answer, "message_ids": True} if message_ids else answer)


def re(frame: dict[str, Any]) -> dict[str, Any]:
    """The ``re`` of an answer to ``frame``: its ``id``, echoed as the protocol says."""
    return {"re": frame["id"]} if "id" in frame else {}


@dataclass(frozen=True)
class FakeGateway:
    url: str
    peers: MemoryObjectReceiveStream[Peer]

    async def accept(self) -> Peer:
        """The next agent connection."""
        with anyio.fail_after(5.0):
            return await self.peers.receive()


@asynccontextmanager
async def fake_gateway() -> AsyncIterator[FakeGateway]:
    """A server at ``/v1/agents`` on a free port of this machine."""
    peers_in: MemoryObjectSendStream[Peer]
    peers_in, peers = anyio.create_memory_object_stream[Peer](4)
    opened: list[Peer] = []

    async def handle(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        frames_in, frames = anyio.create_memory_object_stream[Any](64)
        opened.append(Peer(ws, frames))
        await peers_in.send(opened[-1])
        async with frames_in:
            async for message in ws:
                if message.type is WSMsgType.TEXT:
                    await frames_in.send(assert_client_message(message.data))
        return ws

    app = web.Application()
    app.router.add_get(p.PATH, handle)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    host, port = runner.addresses[0][:2]
    try:
        yield FakeGateway(f"ws://{host}:{port}{p.PATH}", peers)
    finally:
        await runner.cleanup()
        peers_in.close()
        peers.close()
        for peer in opened:
            peer.frames.close()


async def play(
    agent: Callable[[Turn], Awaitable[None]],
    gateway: Callable[[Peer], Awaitable[None]],
    *,
    message_ids: bool = True,
    before: Callable[[Session], Awaitable[None]] | None = None,
) -> None:
    """Connect an SDK session to a fake gateway, which ``gateway`` plays once it answered the
    hello; the session runs ``before``, then ``agent`` on its first turn. Fails, rather than
    hangs, when an answer is never matched to its message."""

    async def run_agent(url: str) -> None:
        async with connect(url, group="support", channels=["ops"], reconnect=False) as session:
            if before is not None:
                await before(session)
            async for turn in session:
                await agent(turn)
                return

    with anyio.fail_after(10.0):
        async with fake_gateway() as fake, anyio.create_task_group() as tg:
            tg.start_soon(run_agent, fake.url)
            peer = await fake.accept()
            await peer.hello(message_ids=message_ids)
            await gateway(peer)


@pytest.mark.anyio
@pytest.mark.parametrize("answer", ["reply", "final"])
async def test_the_answer_s_refusal_is_its_outcome_even_worded_like_a_delta_s(
    answer: str, caplog: pytest.LogCaptureFixture
) -> None:
    refused: list[Rejected] = []

    async def agent(turn: Turn) -> None:
        await turn.stream("one ")
        await turn.stream("two")
        with pytest.raises(Rejected) as caught:
            await getattr(turn, answer)("the whole answer")
        refused.append(caught.value)

    async def gateway(peer: Peer) -> None:
        await peer.send(TURN)
        one, two, last = [await peer.recv() for _ in range(3)]
        assert [one["type"], two["type"], last["type"]] == ["stream", "stream", answer]
        delta = "stream.text: the second delta is refused"
        await peer.send({"type": "error", "code": "invalid", "message": delta, **re(two)})
        # the error answering the reply or final, in a wording that begins like a delta's
        outcome = "stream: this wording belongs to the answer's refusal"
        await peer.send({"type": "error", "code": "invalid", "message": outcome, **re(last)})

    with caplog.at_level(logging.WARNING, logger="bridge_core.agent"):
        await play(agent, gateway)
    assert [(e.code, e.message) for e in refused] == [
        ("invalid", "stream: this wording belongs to the answer's refusal")
    ]
    logged = [r.getMessage() for r in caplog.records if r.name == "bridge_core.agent"]
    assert any("the second delta is refused" in line for line in logged), logged


class Logged(logging.Handler):
    """Sets ``seen`` once the SDK logs a line containing ``text`` (an anyio event: the SDK logs
    in its reading task, on the test's event loop)."""

    def __init__(self, text: str) -> None:
        super().__init__(logging.WARNING)
        self.text = text
        self.seen = anyio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if self.text in record.getMessage():
            self.seen.set()


@pytest.mark.anyio
async def test_a_delta_refused_after_the_final_was_sent_is_not_the_final_s_outcome() -> None:
    acks: list[p.Ack] = []
    refusal = "the delta could not be shown"
    logged = Logged(refusal)

    async def agent(turn: Turn) -> None:
        await turn.stream("one")
        acks.append(await turn.final("the whole answer"))

    async def gateway(peer: Peer) -> None:
        await peer.send(TURN)
        delta, final = await peer.recv(), await peer.recv()
        assert (delta["type"], final["type"]) == ("stream", "final")
        # both answers in flight for one turn: the delta's refusal comes first, worded without
        # the type prefix a gateway older than ids would have given it; the final's ack only
        # once the SDK took the refusal for the delta's (logged it), not for the final's outcome
        error = {"type": "error", "code": "invalid", "message": refusal, "turn": "ops/1"}
        await peer.send({**error, **re(delta)})
        await logged.seen.wait()
        ack = {"type": "ack", "recorded": "final", "turn": "ops/1", "obligation": "ob-1"}
        await peer.send({**ack, **re(final)})

    sdk_log = logging.getLogger("bridge_core.agent")
    sdk_log.addHandler(logged)
    try:
        await play(agent, gateway)
    finally:
        sdk_log.removeHandler(logged)
    assert [(a.recorded, a.obligation) for a in acks] == [("final", "ob-1")]


@pytest.mark.anyio
async def test_an_answer_sent_again_after_unavailable_has_an_id_of_its_own() -> None:
    acks: list[p.Ack] = []

    async def agent(turn: Turn) -> None:
        acks.append(await turn.reply("hello"))

    async def gateway(peer: Peer) -> None:
        await peer.send(TURN)
        first = await peer.recv()
        error = {"type": "error", "code": "unavailable", "message": "reply: send it again"}
        await peer.send({**error, "turn": "ops/1", **re(first)})
        again = await peer.recv()
        assert again["type"] == "reply" and again["id"] != first["id"], (first, again)
        ack = {"type": "ack", "recorded": "reply", "turn": "ops/1", "obligation": "ob-1"}
        await peer.send({**ack, **re(again)})

    await play(agent, gateway)
    assert [a.obligation for a in acks] == ["ob-1"]


@pytest.mark.anyio
async def test_with_a_gateway_older_than_ids_only_events_carry_one_and_answers_match_by_turn(
    caplog: pytest.LogCaptureFixture,
) -> None:
    acks: list[p.Ack] = []

    async def events(session: Session) -> None:
        acks.append(await session.send_events({"kind": "AgentSpawned", "agent": "a1"}))

    async def agent(turn: Turn) -> None:
        await turn.stream("one ")
        await turn.stream("bad")
        acks.append(await turn.final())

    async def gateway(peer: Peer) -> None:
        event = await peer.recv()
        assert event["type"] == "event" and event["id"], event  # always took an id
        ack = {"type": "ack", "recorded": "event", "accepted": 1, "ignored": 0}
        await peer.send({**ack, **re(event)})
        await peer.send(TURN)
        frames = [await peer.recv() for _ in range(3)]
        assert [f["type"] for f in frames] == ["stream", "stream", "final"]
        assert all("id" not in f for f in frames), frames  # it would refuse the field
        # as the gateway before ids answered: no re, the delta's error worded with its type
        delta = "stream.text: contains NUL"
        await peer.send({"type": "error", "code": "invalid", "message": delta, "turn": "ops/1"})
        await peer.send({"type": "ack", "recorded": "final", "turn": "ops/1", "obligation": "ob"})

    with caplog.at_level(logging.WARNING, logger="bridge_core.agent"):
        await play(agent, gateway, message_ids=False, before=events)
    assert [a.recorded for a in acks] == ["event", "final"]
    logged = [r.getMessage() for r in caplog.records if r.name == "bridge_core.agent"]
    assert any("contains NUL" in line for line in logged), logged


@pytest.mark.anyio
@pytest.mark.parametrize("bad", [["reply-2"], {"id": "reply-2"}, 7, None])
async def test_an_answer_whose_re_is_not_a_string_is_ignored_not_fatal(
    bad: object, caplog: pytest.LogCaptureFixture
) -> None:
    acks: list[p.Ack] = []

    async def agent(turn: Turn) -> None:
        acks.append(await turn.reply("hello"))

    async def gateway(peer: Peer) -> None:
        await peer.send(TURN)
        reply = await peer.recv()
        ack = {"type": "ack", "recorded": "reply", "turn": "ops/1", "obligation": "ob-1"}
        # not a gateway message (re is the id echoed: a string), so not the reply's answer;
        # sent as is, past the schema check of Peer.send
        await peer.ws.send_str(json.dumps({**ack, "re": bad, "obligation": "ob-x"}))
        await peer.ws.send_str(json.dumps({**ack, "turn": ["ops/1"], "obligation": "ob-y"}))
        await peer.send({**ack, **re(reply)})

    with caplog.at_level(logging.WARNING, logger="bridge_core.agent"):
        await play(agent, gateway)
    assert [a.obligation for a in acks] == ["ob-1"]


# ---------------------------------------------------------------------- events across connections


async def ack_events(peer: Peer, seconds: float) -> None:
    """Acknowledge every event the agent sends for ``seconds``."""
    with anyio.move_on_after(seconds):
        while True:
            event = await peer.recv()
            ack = {"type": "ack", "recorded": "event", "accepted": 0, "ignored": 0}
            await peer.send({**ack, **re(event)})


@pytest.mark.anyio
async def test_events_sent_while_connections_drop_and_are_replaced_are_acked_or_lost() -> None:
    outcomes: list[str] = []

    async def sender(session: Session, stop: anyio.Event) -> None:
        while not stop.is_set():
            try:
                ack = await session.send_events([])
                outcomes.append(ack.recorded)
            except AgentError as error:  # TurnLost: the connection it went on dropped
                outcomes.append(type(error).__name__)

    async def agent(url: str) -> None:
        async with connect(url, group="support", channels=["ops"], backoff=(0.02, 0.05)) as session:
            stop = anyio.Event()
            async with anyio.create_task_group() as senders:
                for _ in range(20):
                    senders.start_soon(sender, session, stop)
                await dropped.wait()
                stop.set()

    dropped = anyio.Event()
    with anyio.fail_after(20.0):
        async with fake_gateway() as fake, anyio.create_task_group() as tg:
            tg.start_soon(agent, fake.url)
            for _ in range(4):  # each connection acks events for a while, then drops
                peer = await fake.accept()
                await peer.hello(message_ids=True)
                await ack_events(peer, 0.15)
                await peer.ws.close()
            dropped.set()
    assert set(outcomes) <= {"event", "TurnLost"}, sorted(set(outcomes))
    assert "event" in outcomes


@pytest.mark.anyio
async def test_events_after_the_connection_ended_without_reconnect_raise_not_hang() -> None:
    async def gateway(fake: FakeGateway) -> None:
        peer = await fake.accept()
        await peer.hello(message_ids=True)
        await peer.ws.close()

    with anyio.fail_after(10.0):
        async with fake_gateway() as fake, anyio.create_task_group() as tg:
            tg.start_soon(gateway, fake)
            async with connect(fake.url, group="support", channels=["ops"], reconnect=False) as s:
                async for _ in s:  # the iteration ends with the connection
                    raise AssertionError("no turn was sent")
                with pytest.raises(AgentError, match="closed"):
                    await s.send_events([])


@pytest.mark.anyio
async def test_a_reply_cancelled_mid_wait_leaves_no_waiter_and_its_late_ack_settles_nothing() -> (
    None
):
    acks: list[p.Ack] = []
    waiters: list[int] = []

    async def agent(turn: Turn) -> None:
        with anyio.move_on_after(0.2):  # the task answering gives up before the ack
            await turn.reply("first")
        waiters.append(len(turn._connection.waiters))
        acks.append(await turn.reply("second"))

    async def gateway(peer: Peer) -> None:
        await peer.send(TURN)
        first, second = await peer.recv(), await peer.recv()
        assert first["id"] != second["id"], (first, second)
        ack = {"type": "ack", "recorded": "reply", "turn": "ops/1"}
        await peer.send({**ack, "obligation": "late", **re(first)})  # the first's, late
        await peer.send({**ack, "obligation": "ob-2", **re(second)})

    await play(agent, gateway)
    assert waiters == [0]
    assert [a.obligation for a in acks] == ["ob-2"]
