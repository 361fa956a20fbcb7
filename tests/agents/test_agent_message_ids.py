"""``id`` on every client message, echoed as ``re`` in the ``ack`` or ``error`` that answers it
(docs/agent-protocol.md, "Matching answers to messages"), over raw WebSocket frames against a
real gateway; a bad ``id`` is refused naming it, and the connection goes on."""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest

from bridge_core.agent import protocol as p
from bridge_core.ownership import NotAMember
from bridge_core.runtime import Gateway
from bridge_core.runtime.streaming import StreamedReplies

from .conftest import Client, Raw, say, well_formed


async def eligible(hello: dict[str, Any]) -> None:
    """Wait until the member's ``since`` (the log's wall clock) has passed: turns said from now
    on are this connection's to answer."""
    await anyio.sleep(max(0.0, max(hello["since"].values()) - time.time()))


async def next_turn(gateway: Gateway, raw: Raw, text: str) -> str:
    await say(gateway, text)
    turn = await raw.recv()
    assert turn["type"] == "turn" and turn["text"] == text, turn
    return str(turn["turn"])


async def answer(raw: Raw, message: dict[str, Any]) -> dict[str, Any]:
    await raw.send(message)
    return await raw.recv()


@pytest.mark.anyio
async def test_every_ack_echoes_the_id_of_the_message_it_acknowledges(
    gateway: Gateway, client: Client
) -> None:
    raw = await client.connect()
    hello = await raw.hello()
    assert hello["message_ids"] is True
    await eligible(hello)

    turn = await next_turn(gateway, raw, "one")
    ack = await answer(raw, {"type": "reply", "id": "r-1", "turn": turn, "text": "hi"})
    assert (ack["recorded"], ack["turn"], ack["re"]) == ("reply", turn, "r-1"), ack

    turn = await next_turn(gateway, raw, "two")
    ack = await answer(raw, {"type": "busy", "id": "b-1", "turn": turn})
    assert (ack["recorded"], ack["re"]) == ("busy", "b-1"), ack

    turn = await next_turn(gateway, raw, "three")
    ack = await answer(raw, {"type": "decline", "id": "d-1", "turn": turn, "reason": "no"})
    assert (ack["recorded"], ack["re"]) == ("decline", "d-1"), ack

    # a streamed reply: the deltas get no answer, the final its ack
    turn = await next_turn(gateway, raw, "four")
    await raw.send({"type": "stream", "id": "s-1", "turn": turn, "text": "stre"})
    await raw.send({"type": "stream", "id": "s-2", "turn": turn, "text": "amed"})
    ack = await answer(raw, {"type": "final", "id": "f-1", "turn": turn})
    assert (ack["recorded"], ack["re"]) == ("final", "f-1"), ack

    # a final with nothing streamed is a reply, acknowledged with the final's id
    turn = await next_turn(gateway, raw, "five")
    ack = await answer(raw, {"type": "final", "id": "f-2", "turn": turn, "text": "plain"})
    assert (ack["recorded"], ack["re"]) == ("reply", "f-2"), ack

    event = {"kind": "AgentSpawned", "agent": "a1"}
    ack = await answer(raw, {"type": "event", "id": "", "event": event})  # empty: still an id
    assert (ack["recorded"], ack["re"]) == ("event", ""), ack
    # without an id, an answer has no re (as before ids)
    turn = await next_turn(gateway, raw, "six")
    ack = await answer(raw, {"type": "reply", "turn": turn, "text": "no id"})
    assert ack["recorded"] == "reply" and "re" not in ack, ack


@pytest.mark.anyio
async def test_every_error_echoes_the_id_of_the_message_it_refuses(
    gateway: Gateway, client: Client
) -> None:
    early = await client.connect()
    error = await answer(early, {"type": "reply", "id": "early", "turn": "ops/1", "text": "x"})
    assert (error["code"], error["re"]) == ("hello_first", "early"), error
    hello = {"type": "hello", "id": "h-0", "group": "support", "channels": ["nope"], "name": "t"}
    error = await answer(early, hello)
    assert (error["code"], error["re"]) == ("unknown_channel", "h-0"), error

    raw = await client.connect()
    joined = await raw.hello(id="h-1")
    assert "re" not in joined  # the gateway's hello answers; only an error echoes the id
    await eligible(joined)
    again = {"type": "hello", "id": "h-2", "group": "support", "channels": ["ops"], "name": "t"}
    assert (await answer(raw, again))["re"] == "h-2"

    # refused before any handler: an unknown type, a missing field, a frame too large
    error = await answer(raw, {"type": "shout", "id": "u-1"})
    assert (error["code"], error["re"]) == ("unknown_type", "u-1"), error
    error = await answer(raw, {"type": "reply", "id": "i-1", "turn": "ops/1"})
    assert (error["code"], error["field"], error["re"]) == ("invalid", "text", "i-1"), error
    big = {"type": "reply", "id": "big", "turn": "ops/1", "text": "x" * p.MAX_MESSAGE_BYTES}
    error = await answer(raw, big)
    assert (error["code"], error["re"]) == ("too_large", "big"), error
    error = await answer(raw, {"type": "event", "id": "ev", "event": {"kind": 3}})
    assert (error["code"], error["re"]) == ("rejected", "ev"), error

    # not_held, for every message that answers a turn
    for kind, extra in [
        ("reply", {"text": "x"}),
        ("busy", {}),
        ("decline", {}),
        ("error", {"message": "model down"}),
        ("stream", {"text": "x"}),
        ("final", {"text": "x"}),
    ]:
        message = {"type": kind, "id": f"nh-{kind}", "turn": "ops/99999", **extra}
        error = await answer(raw, message)
        assert (error["code"], error["re"]) == ("not_held", f"nh-{kind}"), error

    # the agent's error is not answered when it is taken; a later answer to the turn is refused
    # (invalid while the error is being taken, not_held once it was)
    turn = await next_turn(gateway, raw, "fails")
    await raw.send({"type": "error", "id": "e-1", "turn": turn, "message": "model down"})
    error = await answer(raw, {"type": "reply", "id": "late", "turn": turn, "text": "late"})
    assert error["code"] in ("invalid", "not_held") and error["re"] == "late", error

    # a second answer while the first is being recorded, and a delta after the final
    turn = await next_turn(gateway, raw, "streamed")
    await raw.send({"type": "stream", "id": "s-1", "turn": turn, "text": "part"})
    await raw.send({"type": "final", "id": "f-1", "turn": turn})
    await raw.send({"type": "reply", "id": "second", "turn": turn, "text": "again"})
    answers = {frame.get("re"): frame for frame in [await raw.recv(), await raw.recv()]}
    assert answers["f-1"]["recorded"] == "final", answers
    assert answers["second"]["code"] in ("invalid", "not_held"), answers
    error = await answer(raw, {"type": "stream", "id": "s-2", "turn": turn, "text": "more"})
    assert (error["code"], error["re"]) == ("not_held", "s-2"), error


@pytest.mark.anyio
async def test_an_answer_the_gateway_fails_to_record_is_refused_with_its_id(
    gateway: Gateway, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    channel = gateway.channels["ops"]
    record_reply = channel.record_reply
    failures = iter([RuntimeError("the ledger blinked"), NotAMember("expired meanwhile")])

    async def failing(*args: Any, **kwargs: Any) -> Any:
        failure = next(failures, None)
        if failure is not None:
            raise failure
        return await record_reply(*args, **kwargs)

    monkeypatch.setattr(channel, "record_reply", failing)
    raw = await client.connect()
    await eligible(await raw.hello())

    turn = await next_turn(gateway, raw, "one")
    error = await answer(raw, {"type": "reply", "id": "try-1", "turn": turn, "text": "a"})
    assert (error["code"], error["turn"], error["re"]) == ("unavailable", turn, "try-1"), error
    # sent again, with an id of its own: recording it finds the member expired
    error = await answer(raw, {"type": "reply", "id": "try-2", "turn": turn, "text": "a"})
    assert (error["code"], error["turn"], error["re"]) == ("not_held", turn, "try-2"), error


@pytest.mark.anyio
async def test_a_delta_the_gateway_fails_on_is_refused_with_its_id(
    gateway: Gateway, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(self: StreamedReplies, obligation: str, delta: str) -> None:
        raise RuntimeError("a bug on the gateway's side")

    raw = await client.connect()
    await eligible(await raw.hello())
    turn = await next_turn(gateway, raw, "stream it")
    monkeypatch.setattr(StreamedReplies, "feed", broken)
    error = await answer(raw, {"type": "stream", "id": "s-1", "turn": turn, "text": "x"})
    assert (error["code"], error["turn"], error["re"]) == ("unavailable", turn, "s-1"), error
    monkeypatch.undo()
    ack = await answer(raw, {"type": "final", "id": "f-1", "turn": turn, "text": "whole"})
    assert (ack["recorded"], ack["re"]) == ("final", "f-1"), ack


BAD_IDS: list[tuple[object, str]] = [
    (7, "must be a string, got int"),
    (None, "must be a string, got null"),
    (["a"], "must be a string, got list"),
    (True, "must be a string, got bool"),
    ("x" * (p.MAX_ID_CHARS + 1), f"longer than {p.MAX_ID_CHARS} characters"),
    ("a\ud800", "lone surrogate"),
    ("a\x00b", "NUL"),
]


@pytest.mark.anyio
async def test_a_bad_id_is_refused_naming_it_and_the_connection_goes_on(
    gateway: Gateway, client: Client
) -> None:
    raw = await client.connect()
    hello = await raw.hello()
    for kind in p.CLIENT_TYPES:
        for value, problem in BAD_IDS:
            error = await answer(raw, {**well_formed(kind), "id": value})
            assert error["code"] == "invalid" and "re" not in error, (kind, value, error)
            assert error["field"] in ("id", f"{kind}.id"), (kind, value, error)
            assert error["message"].startswith(f"{kind}.id: "), (kind, value, error)
            assert problem in error["message"], (kind, value, error)
            # served still; a good message resets the bad ones in a row (16 close the socket)
            ok = await answer(raw, {"type": "event", "id": f"{kind}-ok", "event": []})
            assert ok["re"] == f"{kind}-ok", ok
    assert not raw.ws.closed
    await eligible(hello)
    turn = await next_turn(gateway, raw, "still served?")
    longest = "x" * p.MAX_ID_CHARS
    ack = await answer(raw, {"type": "reply", "id": longest, "turn": turn, "text": "y"})
    assert ack["re"] == longest, ack


@pytest.mark.anyio
async def test_a_refused_message_whose_id_key_is_written_with_escapes_is_still_named(
    gateway: Gateway, client: Client
) -> None:
    # "\u0069d" is "id" as JSON may write it: the same key, so the same message and the same re
    raw = await client.connect()
    await raw.hello()
    for key in ("\\u0069d", "i\\u0064", "\\u0069\\u0064"):
        await raw.send('{"type":"reply","' + key + '":"esc","turn":"ops/1"}')  # no text
        error = await raw.recv()
        assert (error["code"], error["field"], error.get("re")) == ("invalid", "text", "esc"), (
            key,
            error,
        )
        await raw.send('{"type":"shout","' + key + '":"esc-2"}')
        error = await raw.recv()
        assert (error["code"], error.get("re")) == ("unknown_type", "esc-2"), (key, error)
    # read, the message's own id: echoed as for any other spelling
    await raw.send('{"type":"event","\\u0069d":"esc-3","event":[]}')
    assert (await raw.recv())["re"] == "esc-3"


@pytest.mark.anyio
async def test_ids_count_code_points_and_a_key_written_twice_takes_its_last_value(
    gateway: Gateway, client: Client
) -> None:
    raw = await client.connect()
    await raw.hello()
    astral = "\U0001f600" * p.MAX_ID_CHARS  # 200 code points, 400 UTF-16 units
    ack = await answer(raw, {"type": "event", "id": astral, "event": []})
    assert ack["re"] == astral, ack
    error = await answer(raw, {"type": "event", "id": astral + "x", "event": []})
    assert (error["code"], error["field"], "re" in error) == ("invalid", "id", False), error
    # JSON readers differ on a repeated key; this one (and the schema test's) takes the last
    await raw.send('{"type":"event","id":"first","event":[],"id":"last"}')
    assert (await raw.recv())["re"] == "last"
    await raw.send('{"type":"event","id":"ok","event":[],"id":7}')
    error = await raw.recv()
    assert (error["code"], error["field"], "re" in error) == ("invalid", "id", False), error
    await raw.send('{"type":"event","id":7,"event":[],"id":"ok"}')
    assert (await raw.recv())["re"] == "ok"


@pytest.mark.anyio
async def test_a_stream_the_gateway_fails_to_open_stays_answerable(
    gateway: Gateway, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened = StreamedReplies.open

    async def fails_once(self: StreamedReplies, obligation: str, *, thread: str | None) -> Any:
        monkeypatch.setattr(StreamedReplies, "open", opened)
        raise RuntimeError("a store that blinked")

    raw = await client.connect()
    await eligible(await raw.hello())
    turn = await next_turn(gateway, raw, "stream it")
    monkeypatch.setattr(StreamedReplies, "open", fails_once)
    error = await answer(raw, {"type": "stream", "id": "s-1", "turn": turn, "text": "x"})
    assert (error["code"], error["re"]) == ("unavailable", "s-1"), error
    # The next delta opens the stream, and its final is recorded.
    await raw.send({"type": "stream", "id": "s-2", "turn": turn, "text": "partial "})
    ack = await answer(raw, {"type": "final", "id": "f-1", "turn": turn, "text": "whole"})
    assert (ack["type"], ack["recorded"], ack["re"]) == ("ack", "final", "f-1"), ack
