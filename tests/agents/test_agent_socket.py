"""``/v1/agents`` over raw WebSocket frames (aiohttp's client, not the SDK): authentication before
the upgrade, every message type, every bad input, backpressure, and how a connection leaves.

Every frame the gateway sends is checked against docs/agent-protocol.schema.json (``Raw.recv``).
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import pytest
from aiohttp.test_utils import make_mocked_request

from bridge_core.agent import protocol as p
from bridge_core.conversation import Leave, LeaveReason
from bridge_core.runtime import Gateway
from bridge_core.runtime.agent_socket import DECLINED, AgentSockets, AgentSocketSettings
from bridge_core.streams import INTERRUPTED

from .conftest import (
    AGENT_TOKEN,
    OPTIONS,
    TOKEN,
    Client,
    Raw,
    frames_answering,
    make_config,
    posts,
    say,
    written,
)


async def until(condition, limit: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    with anyio.fail_after(limit):
        while not condition():  # noqa: ASYNC110 - waiting on a file the gateway writes
            await anyio.sleep(0.01)


# ---------------------------------------------------------------------- authentication


@pytest.mark.anyio
@pytest.mark.parametrize(
    "token, status",
    [(None, 401), ("wrong", 403), (TOKEN, None), (AGENT_TOKEN, None)],
    ids=["missing", "wrong", "api-token", "agent-token"],
)
async def test_the_upgrade_needs_a_token(
    client: Client, token: str | None, status: int | None
) -> None:
    if status is None:
        raw = await client.connect(token)
        assert (await raw.hello())["gateway"]
        return
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await client.connect(token)
    assert refused.value.status == status  # refused by HTTP status: no socket was opened


@pytest.mark.anyio
async def test_without_any_token_only_loopback_peers_are_served(tmp_path: Path) -> None:
    class Host:
        gateway_id = "gw"
        accepting = True

    sockets = AgentSockets(Host(), AgentSocketSettings())  # type: ignore[arg-type]
    far = make_mocked_request("GET", "/v1/agents", transport=_Transport("10.1.2.3"))
    near = make_mocked_request("GET", "/v1/agents", transport=_Transport("127.0.0.1"))
    refused = sockets.authenticate(far)
    assert not isinstance(refused, str) and refused.status == 403
    assert b"serves this machine only" in refused.body  # type: ignore[operator]
    assert sockets.authenticate(near) == "local"


class _Transport:
    def __init__(self, host: str) -> None:
        self.host = host

    def get_extra_info(self, name: str, default: object = None) -> object:
        return (self.host, 50000) if name == "peername" else default


@pytest.mark.anyio
async def test_a_plain_get_is_told_to_upgrade(gateway: Gateway) -> None:
    async with aiohttp.ClientSession() as session:
        response = await session.get(
            f"{gateway.url}/v1/agents", headers={"Authorization": f"Bearer {TOKEN}"}
        )
        assert response.status == 400
        assert "WebSocket" in (await response.json())["error"]


# ---------------------------------------------------------------------- a whole session


@pytest.mark.anyio
async def test_every_message_type_in_one_session(
    gateway: Gateway, client: Client, tmp_path: Path
) -> None:
    raw = await client.connect()
    hello = await raw.hello(concurrency=4)
    member = hello["members"]["ops"]
    assert member.startswith("support/t@") and hello["concurrency"] == 4
    assert gateway.channels["ops"].log is not None
    members = await gateway.channels["ops"].log.statistics()
    assert members.members == 1  # the connection is the group's one member
    await anyio.sleep(OPTIONS.settle)

    # reply: recorded (ledger row, frame), acknowledged, then sent
    await say(gateway, "hello", author="ann")
    turn = await raw.recv()
    assert turn["type"] == "turn" and turn["text"] == "hello" and turn["channel"] == "ops"
    assert [h["kind"] for h in turn["history"]] == ["turn"]
    await raw.send({"type": "reply", "turn": turn["turn"], "text": "hi ann"})
    ack = await raw.recv()
    assert ack == {
        "type": "ack",
        "recorded": "reply",
        "turn": turn["turn"],
        "obligation": ack["obligation"],
    }
    await until(lambda: "hi ann" in posts(tmp_path))
    frames = await frames_answering(gateway)
    assert [(f.answers_seq, f.member) for f in frames] == [(turn["seq"], member)]

    # busy: the notice is the reply
    await say(gateway, "are you there", author="bob")
    turn2 = await raw.recv()
    await raw.send({"type": "busy", "turn": turn2["turn"], "notice": "busy, later"})
    assert (await raw.recv())["recorded"] == "busy"
    await until(lambda: "busy, later" in posts(tmp_path))

    # decline: settled by a frame, nothing sent
    await say(gateway, "not for you", author="cy")
    turn3 = await raw.recv()
    await raw.send({"type": "decline", "turn": turn3["turn"], "reason": "off topic"})
    assert (await raw.recv())["recorded"] == "decline"
    declined = [f for f in await frames_answering(gateway) if f.answers_seq == turn3["seq"]]
    assert [f.obligation for f in declined] == [DECLINED]

    # error: nothing recorded, the turn stays pending (no ack)
    await say(gateway, "fails", author="dee")
    turn4 = await raw.recv()
    await raw.send({"type": "error", "turn": turn4["turn"], "message": "model down"})
    await raw.send({"type": "event", "id": "e1", "event": {"kind": "AgentSpawned", "agent": "a9"}})
    event_ack = await raw.recv()
    assert event_ack == {
        "type": "ack",
        "recorded": "event",
        "re": "e1",
        "accepted": 1,
        "ignored": 0,
    }
    assert turn4["seq"] not in {f.answers_seq for f in await frames_answering(gateway)}
    # and the error released it: a reply now is to a turn not held
    await raw.send({"type": "reply", "turn": turn4["turn"], "text": "late"})
    assert (await raw.recv())["code"] == "not_held"

    # a streamed reply: deltas, then the final, recorded like a reply
    await say(gateway, "stream it", author="eve")
    turn5 = await raw.recv()
    for delta in ("str", "eamed ", "whole"):
        await raw.send({"type": "stream", "turn": turn5["turn"], "text": delta})
    await raw.send({"type": "final", "turn": turn5["turn"]})
    assert (await raw.recv())["recorded"] == "final"
    await until(lambda: "streamed whole" in written(tmp_path))
    await raw.send({"type": "stream", "turn": turn5["turn"], "text": "more"})
    assert (await raw.recv())["code"] == "not_held"
    await until(lambda: "a9" in " ".join(posts(tmp_path)))  # the event notified ops


@pytest.mark.anyio
async def test_a_stream_ended_otherwise_says_interrupted_and_a_final_may_replace_the_text(
    gateway: Gateway, client: Client, tmp_path: Path
) -> None:
    raw = await client.connect()
    await raw.hello(concurrency=4)
    await anyio.sleep(OPTIONS.settle)
    # streamed, then answered busy: the partial says it was interrupted, the notice is sent
    await say(gateway, "one", author="ann")
    turn = await raw.recv()
    await raw.send({"type": "stream", "turn": turn["turn"], "text": "thinking about "})
    await until(lambda: any(t.startswith("thinking about") for t in written(tmp_path)))
    await raw.send({"type": "busy", "turn": turn["turn"], "notice": "too busy"})
    assert (await raw.recv())["recorded"] == "busy"
    await until(lambda: INTERRUPTED in written(tmp_path) and "too busy" in written(tmp_path))
    # a final with its own text replaces the deltas' text in the same message
    await say(gateway, "two", author="bob")
    turn = await raw.recv()
    await raw.send({"type": "stream", "turn": turn["turn"], "text": "draft"})
    await until(lambda: any(t.startswith("draft") for t in written(tmp_path)))
    await raw.send({"type": "final", "turn": turn["turn"], "text": "the real answer"})
    assert (await raw.recv())["recorded"] == "final"
    await until(lambda: "the real answer" in written(tmp_path))
    assert "the real answer" not in posts(tmp_path)  # an edit of the draft's message
    # a final with no stream before it is a plain reply
    await say(gateway, "three", author="cy")
    turn = await raw.recv()
    await raw.send({"type": "final", "turn": turn["turn"], "text": "plain"})
    assert (await raw.recv())["recorded"] == "reply"
    await until(lambda: "plain" in posts(tmp_path))


# ---------------------------------------------------------------------- bad input

BAD = [
    ("not json", "malformed", "not JSON"),
    ("[1, 2]", "malformed", "JSON object"),
    ('{"type": "shout"}', "unknown_type", "'shout'"),
    ('{"text": "x"}', "invalid", "'type'"),
    ('{"type": "reply", "turn": "ops/1"}', "invalid", "reply.text"),
    ('{"type": "reply", "turn": "ops/1", "text": "x", "extra": 1}', "invalid", "'extra'"),
    ('{"type": "reply", "turn": "ops/99999", "text": "x"}', "not_held", "ops/99999"),
    ('{"type": "busy", "turn": "ops/99999"}', "not_held", "not held"),
    ('{"type": "reply", "turn": "ops/1", "text": "a\\u0000b"}', "invalid", "NUL"),
    ('{"type": "reply", "turn": "ops/1", "text": "\\ud800"}', "invalid", "lone surrogate"),
    ("[" * 5000 + "]" * 5000, "malformed", ""),
    ('{"type": "event", "event": {"kind": 3}}', "rejected", "kind"),
    (
        '{"type": "hello", "group": "support", "channels": ["ops"], "name": "t"}',
        "second_hello",
        "already",
    ),
]


@pytest.mark.anyio
async def test_each_bad_input_gets_an_error_naming_it_and_changes_nothing(
    gateway: Gateway, client: Client, tmp_path: Path
) -> None:
    raw = await client.connect()
    await raw.hello()
    for frame, code, says in BAD:
        await raw.send(frame)
        error = await raw.recv()
        assert error["type"] == "error" and error["code"] == code, (frame[:60], error)
        assert says in error["message"], (frame[:60], error)
    await raw.ws.send_bytes(b"\x00\x01")
    assert (await raw.recv())["code"] == "malformed"
    big = json.dumps({"type": "reply", "turn": "ops/1", "text": "x" * p.MAX_MESSAGE_BYTES})
    await raw.send(big)
    too_large = await raw.recv()
    assert too_large["code"] == "too_large" and str(p.MAX_MESSAGE_BYTES) in too_large["message"]
    # the connection is still served after all of it
    await anyio.sleep(OPTIONS.settle)
    await say(gateway, "still there?")
    turn = await raw.recv()
    await raw.send({"type": "reply", "turn": turn["turn"], "text": "yes"})
    assert (await raw.recv())["recorded"] == "reply"
    await until(lambda: "yes" in posts(tmp_path))


@pytest.mark.anyio
@pytest.mark.parametrize("constant", ["Infinity", "-Infinity", "NaN"])
async def test_a_constant_json_has_not_is_malformed_wherever_it_stands(
    client: Client, constant: str
) -> None:
    # Python's json writes these for float("inf") and float("nan"); a gateway that read them
    # would echo an id or a number no other JSON reader takes
    raw = await client.connect()
    await raw.hello()
    await raw.send(f'{{"type": "busy", "turn": "ops/1", "id": {constant}}}')
    error = await raw.recv()
    assert error["code"] == "malformed" and f"{constant} is not JSON" in error["message"], error
    assert "re" not in error


@pytest.mark.anyio
async def test_an_error_names_a_field_as_text_an_error_frame_can_carry(client: Client) -> None:
    raw = await client.connect()
    await raw.hello()
    await raw.send('{"type": "reply", "turn": "ops/1", "text": "x", "\\ud800": 1}')
    error = await raw.recv()
    assert error["code"] == "invalid" and error["field"] == "\ufffd", error


@pytest.mark.anyio
async def test_an_event_number_no_float_holds_is_refused_naming_it(client: Client) -> None:
    raw = await client.connect()
    await raw.hello()
    huge = "1" + "0" * 400  # JSON allows the integer
    event = '{"kind": "AgentSpawned", "agent": "a", "at": ' + huge + "}"
    await raw.send('{"type": "event", "event": ' + event + "}")
    error = await raw.recv()
    assert error["code"] == "rejected" and "at: must be a finite number" in error["message"]
    await raw.send({"type": "event", "event": {"kind": "AgentSpawned", "agent": "a"}})
    assert (await raw.recv())["recorded"] == "event"


@pytest.mark.anyio
async def test_a_failure_of_the_gateway_on_one_message_is_named_and_the_connection_served(
    gateway: Gateway, client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(body: object) -> object:
        raise RuntimeError("a bug on the gateway's side")

    raw = await client.connect()
    await raw.hello()
    monkeypatch.setattr("bridge_core.runtime.agent_connection.parse_events_body", broken)
    await raw.send({"type": "event", "id": "e1", "event": {"kind": "AgentSpawned", "agent": "a"}})
    error = await raw.recv()
    assert error["code"] == "unavailable" and error["re"] == "e1", error
    assert "RuntimeError" in error["message"] and "send it again" in error["message"]
    monkeypatch.undo()
    await anyio.sleep(OPTIONS.settle)
    await say(gateway, "still served?")
    turn = await raw.recv()
    await raw.send({"type": "reply", "turn": turn["turn"], "text": "yes"})
    assert (await raw.recv())["recorded"] == "reply"


@pytest.mark.anyio
async def test_a_final_with_nothing_streamed_must_carry_text(
    gateway: Gateway, client: Client, tmp_path: Path
) -> None:
    raw = await client.connect()
    await raw.hello()
    await anyio.sleep(OPTIONS.settle)
    await say(gateway, "hi")
    turn = await raw.recv()
    for final in (
        {"type": "final", "turn": turn["turn"]},
        {"type": "final", "turn": turn["turn"], "text": " \n"},
    ):
        await raw.send(final)
        error = await raw.recv()
        assert error["code"] == "invalid" and "final.text" in error["message"], error
    await raw.send({"type": "final", "turn": turn["turn"], "text": "the answer"})
    assert (await raw.recv())["recorded"] == "reply"
    await until(lambda: "the answer" in posts(tmp_path))
    assert "" not in written(tmp_path) and " \n" not in written(tmp_path)


@pytest.mark.anyio
async def test_hello_mistakes_are_named_and_a_corrected_hello_is_accepted(client: Client) -> None:
    raw = await client.connect()
    await raw.send({"type": "reply", "turn": "ops/1", "text": "early"})
    assert (await raw.recv())["code"] == "hello_first"
    await raw.send({"type": "hello", "group": "support", "channels": ["nope"], "name": "t"})
    unknown = await raw.recv()
    assert unknown["code"] == "unknown_channel" and "'nope'" in unknown["message"]
    await raw.send({"type": "hello", "group": "support", "channels": ["dev"], "name": "t"})
    wrong = await raw.recv()
    assert wrong["code"] == "wrong_group" and "'builders'" in wrong["message"]
    await raw.send({"type": "hello", "group": "x", "channels": ["quiet"], "name": "t"})
    assert "set its agent_group" in (await raw.recv())["message"]
    await raw.send(
        {"type": "hello", "group": "support", "channels": ["ops"], "name": "t", "protocol": 2}
    )
    assert "protocol 1" in (await raw.recv())["message"]
    await raw.hello()


@pytest.mark.anyio
async def test_a_connection_that_keeps_sending_garbage_is_closed_and_others_are_served(
    gateway: Gateway, client: Client, tmp_path: Path
) -> None:
    bad = await client.connect()
    await bad.hello(concurrency=2)
    await anyio.sleep(OPTIONS.settle)
    await say(gateway, "answered before the garbage", author="ann")
    answered = await bad.recv()
    await bad.send({"type": "reply", "turn": answered["turn"], "text": "acked answer"})
    assert (await bad.recv())["recorded"] == "reply"
    await say(gateway, "held during the garbage", author="bob")
    held = await bad.recv()
    good = await client.connect()
    await good.hello()
    limit = gateway.agent_sockets.settings.max_bad_messages  # type: ignore[union-attr]
    for _ in range(limit):
        await bad.send("garbage")
    for _ in range(limit):
        assert (await bad.recv())["code"] == "malformed"
    closing = await bad.ws.receive()
    assert closing.type is aiohttp.WSMsgType.CLOSE
    assert bad.ws.close_code == p.CLOSE_POLICY and "bad messages in a row" in closing.extra
    # the closed connection's held turn moved to the other at once (the gateway closed it:
    # a graceful leave), and what it had been acknowledged for was sent
    moved = await good.recv()
    assert moved["text"] == held["text"] == "held during the garbage"
    await good.send({"type": "reply", "turn": moved["turn"], "text": "ok"})
    assert (await good.recv())["recorded"] == "reply"
    await until(lambda: {"acked answer", "ok"} <= set(posts(tmp_path)))


@pytest.mark.anyio
async def test_no_hello_in_time_closes_with_its_code(tmp_path: Path) -> None:
    gateway = Gateway(make_config(tmp_path), options=OPTIONS)
    async with gateway:
        assert gateway.agent_sockets is not None
        gateway.agent_sockets.settings = AgentSocketSettings(api_token=TOKEN, hello_timeout=0.2)
        async with aiohttp.ClientSession() as session:
            ws = await session.ws_connect(
                gateway.url.replace("http", "ws") + "/v1/agents",  # type: ignore[union-attr]
                headers={"Authorization": f"Bearer {TOKEN}"},
            )
            closing = await ws.receive(timeout=5)
            assert closing.type is aiohttp.WSMsgType.CLOSE and ws.close_code == p.CLOSE_NO_HELLO


# ---------------------------------------------------------------------- backpressure


@pytest.mark.anyio
async def test_turns_beyond_the_concurrency_limit_wait_in_the_member(
    gateway: Gateway, client: Client
) -> None:
    raw = await client.connect()
    await raw.hello(concurrency=2)
    await anyio.sleep(OPTIONS.settle)
    for i in range(6):
        await say(gateway, f"q{i}", author=f"user{i}")  # six conversations
    first = [await raw.recv(), await raw.recv()]
    await raw.nothing_for(0.5)  # the other four are not on the socket
    (connection,) = gateway.agent_sockets.connections  # type: ignore[union-attr]
    assert len(connection.held) == 2
    seen = {t["text"] for t in first}
    for turn in first:
        await raw.send({"type": "reply", "turn": turn["turn"], "text": "a"})
    pending = list(first)
    while len(seen) < 6:
        message = await raw.recv()
        if message["type"] == "turn":
            assert len(connection.held) <= 2
            seen.add(message["text"])
            pending.append(message)
            await raw.send({"type": "reply", "turn": message["turn"], "text": "a"})
    assert seen == {f"q{i}" for i in range(6)}


# ---------------------------------------------------------------------- leaving


async def first_turn(*peers: Raw) -> tuple[dict[str, Any], Raw]:
    """The first turn any of ``peers`` is sent, and which peer got it (polled in turn)."""
    while True:
        for peer in peers:
            with anyio.move_on_after(0.05):
                return await peer.recv(), peer


@pytest.mark.anyio
async def test_a_graceful_close_leaves_at_once_and_its_unanswered_turns_move(
    gateway: Gateway, client: Client
) -> None:
    a = await client.connect()
    b = await client.connect()
    hello_a = await a.hello()
    hello_b = await b.hello()
    await anyio.sleep(OPTIONS.settle)
    # one turn in each conversation until one is A's
    held_by_a = None
    for i in range(40):
        await say(gateway, f"t{i}", author=f"p{i}")
        with anyio.fail_after(5):
            message, raw = await first_turn(a, b)
        if raw is a:
            held_by_a = message
        else:
            # answered outside any short timeout: under load the ack may take longer
            await b.send({"type": "reply", "turn": message["turn"], "text": "b"})
            assert (await b.recv())["type"] == "ack"
        if held_by_a is not None:
            break
    assert held_by_a is not None
    await a.ws.close()  # close frame 1000: a graceful leave
    moved = await b.recv()
    assert moved["turn"] == held_by_a["turn"] and moved["text"] == held_by_a["text"]
    log = gateway.channels["ops"].log
    assert log is not None
    leaves = [r for r in await log.read(after_seq=0, limit=10_000) if isinstance(r, Leave)]
    assert [(r.member, r.reason) for r in leaves] == [
        (hello_a["members"]["ops"], LeaveReason.GRACEFUL)
    ]
    assert hello_b["members"]["ops"] != hello_a["members"]["ops"]


@pytest.mark.anyio
async def test_a_close_right_after_hello_leaves_at_once(gateway: Gateway, client: Client) -> None:
    a = await client.connect()
    hello_a = await a.hello(concurrency=4)
    b = await client.connect()
    await b.send({"type": "hello", "group": "support", "channels": ["ops"], "name": "b"})
    await b.ws.close()  # before the gateway's hello: its members were still joining
    log = gateway.channels["ops"].log
    assert log is not None
    # without the fix its members stayed, owning turns, until the drain deadline (15 s)
    with anyio.fail_after(5):
        while True:
            records = await log.read(after_seq=0, limit=10_000)
            leaves = [r for r in records if isinstance(r, Leave)]
            if leaves:
                break
            await anyio.sleep(0.05)
    assert [r.reason for r in leaves] == [LeaveReason.GRACEFUL]
    assert leaves[0].member != hello_a["members"]["ops"]
    await anyio.sleep(OPTIONS.settle)
    for i in range(3):  # every conversation's turn goes to the one left
        await say(gateway, f"q{i}", author=f"p{i}")
        assert (await a.recv())["type"] == "turn"


@pytest.mark.anyio
async def test_a_recorded_reply_waiting_for_its_turn_outlives_its_connection(
    tmp_path: Path,
) -> None:
    # One send every 6 s: the second reply waits at the channel past the connection's drain
    # deadline (grace + 5 s), whose cancellation left it unsent until a restart.
    config = make_config(tmp_path, budget={"burst": 1, "per_hour": 600})
    async with (
        Gateway(config, options=dataclasses.replace(OPTIONS, grace=0.1)) as gateway,
        aiohttp.ClientSession() as session,
    ):
        assert gateway.url is not None
        raw = await Client(
            session, gateway.url.replace("http://", "ws://") + "/v1/agents"
        ).connect()
        await raw.hello(concurrency=2)
        await anyio.sleep(OPTIONS.settle)
        for name in ("first", "second"):
            await say(gateway, f"{name}?", author=name)
            turn = await raw.recv()
            await raw.send({"type": "reply", "turn": turn["turn"], "text": f"{name} answer"})
            assert (await raw.recv())["recorded"] == "reply"
        await raw.ws.close()
        await until(lambda: "second answer" in posts(tmp_path), limit=15)
        assert posts(tmp_path).count("first answer") == 1


@pytest.mark.anyio
async def test_a_dropped_connection_is_expired_not_left(gateway: Gateway, client: Client) -> None:
    a = await client.connect()
    hello_a = await a.hello()
    # drop: the TCP connection goes without a close frame
    connection = next(iter(gateway.agent_sockets.connections))  # type: ignore[union-attr]
    transport = connection.ws._req.transport  # type: ignore[union-attr]
    assert transport is not None
    transport.abort()
    log = gateway.channels["ops"].log
    assert log is not None
    with anyio.fail_after(10):
        while True:
            leaves = [r for r in await log.read(after_seq=0, limit=10_000) if isinstance(r, Leave)]
            if leaves:
                break
            # the reaper runs in live members' heartbeats: one is needed to expire the other
            if not any(c is not connection for c in gateway.agent_sockets.connections):  # type: ignore[union-attr]
                b = await client.connect()
                await b.hello()
            await anyio.sleep(0.05)
    assert [(r.member, r.reason) for r in leaves] == [
        (hello_a["members"]["ops"], LeaveReason.EXPIRED)
    ]


@pytest.mark.anyio
async def test_an_in_process_agent_and_a_connection_share_one_group(tmp_path: Path) -> None:
    config = make_config(tmp_path, agent="bridge_core.runtime.agents:echo_agent")
    async with Gateway(config, options=OPTIONS) as gateway, aiohttp.ClientSession() as session:
        assert gateway.url is not None
        client = Client(session, gateway.url.replace("http://", "ws://") + "/v1/agents")
        raw = await client.connect()
        hello = await raw.hello(concurrency=8)
        await anyio.sleep(OPTIONS.settle * 2)
        for i in range(30):
            await say(gateway, f"q{i}", author=f"person{i}")  # thirty conversations
        by_socket = 0
        with anyio.move_on_after(3):
            while by_socket + sum(1 for t in posts(tmp_path) if t.startswith("echo:")) < 30:
                message = await raw.recv()
                if message["type"] == "turn":
                    by_socket += 1
                    await raw.send({"type": "reply", "turn": message["turn"], "text": "socket"})
        await until(lambda: len(posts(tmp_path)) >= 30)
        frames = await frames_answering(gateway)
        await raw.ws.close()
    members = Counter(f.member for f in frames)
    assert len(frames) == 30 and len({f.answers_seq for f in frames}) == 30
    assert len(members) == 2 and members[hello["members"]["ops"]] == by_socket > 0
    assert posts(tmp_path).count("socket") == by_socket
