"""Fuzzing ``/v1/agents`` with hypothesis over full Unicode: every frame a client sends gets
exactly one answer (an ``error`` naming the problem, or an ``ack``), every answer follows the
schema, the connection stays open, nothing is recorded, and the gateway keeps serving."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge_core.agent import protocol as p
from bridge_core.runtime import Gateway
from bridge_core.testing.http_fuzz import ANY_TEXT

from .conftest import OPTIONS, Client, frames_answering, say, well_formed

# full Unicode: lone surrogates, NUL and control characters included (JSON escapes them);
# st.characters() alone never draws a surrogate, so the kit's ANY_TEXT
any_text = ANY_TEXT
# no NaN or infinity: json.dumps writes them as NaN and Infinity, which are not JSON, and the
# gateway answers such a frame as malformed before it reads any id
finite = st.floats(allow_nan=False, allow_infinity=False)
scalar = st.none() | st.booleans() | st.integers() | finite | any_text
nested = st.recursive(
    scalar,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(any_text, inner, max_size=3),
    max_leaves=12,
)


def deep(depth: int) -> str:
    """JSON nested ``depth`` levels (built as text: json.dumps itself would recurse too deep)."""
    return '{"a":[' * depth + '"x"' + "]}" * depth


@st.composite
def frame(draw: st.DrawFn) -> str:
    choice = draw(st.integers(0, 4))
    if choice == 0:  # arbitrary text, not necessarily JSON
        return draw(st.text(st.characters(codec="utf-8"), max_size=60))
    if choice == 1:  # deep nesting
        kind = json.dumps(draw(st.sampled_from(p.CLIENT_TYPES)))
        return f'{{"type":{kind},"x":{deep(draw(st.integers(16, 5000)))}}}'
    message: dict[str, Any] = {
        "type": draw(st.sampled_from([*p.CLIENT_TYPES, "", "Reply", "turn"]) | any_text)
    }
    for key in draw(
        st.lists(
            st.sampled_from(
                [
                    "turn",
                    "text",
                    "notice",
                    "event",
                    "id",
                    "group",
                    "channels",
                    "name",
                    "concurrency",
                ]
            )
            | any_text,
            max_size=4,
        )
    ):
        message[key] = draw(nested)
    if choice == 2:
        message["turn"] = draw(any_text)  # never a held turn: this connection holds none
        message["text"] = draw(any_text)
    return json.dumps(message)  # ensure_ascii: lone surrogates travel as \ud800 escapes


def _type_of(frame: str) -> object:
    try:
        data = json.loads(frame)
    except (ValueError, RecursionError):
        return None
    return data.get("type") if isinstance(data, dict) else None


@pytest.mark.anyio
@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(frames=st.lists(frame(), min_size=1, max_size=8))
async def test_every_frame_gets_one_answer_and_the_connection_survives(
    gateway: Gateway, client: Client, frames: list[str]
) -> None:
    raw = await client.connect()
    await raw.hello()
    before = len(await frames_answering(gateway))
    for text in frames:
        await raw.send(text)
        answer = await raw.recv()  # schema-checked
        assert answer["type"] in ("error", "ack"), answer
        if answer["type"] == "error":
            assert answer["code"] in p.ERROR_CODES and answer["message"]
            sent = _type_of(text)
            if sent in p.CLIENT_TYPES and answer["code"] not in ("malformed", "too_large"):
                # the message begins with the type it answers (the SDK tells deltas by it)
                assert answer["message"].startswith((f"{sent}:", f"{sent}.")), (sent, answer)
    assert not raw.ws.closed
    await raw.send({"type": "event", "id": "alive", "event": []})
    assert (await raw.recv()) == {
        "type": "ack",
        "recorded": "event",
        "re": "alive",
        "accepted": 0,
        "ignored": 0,
    }
    await raw.ws.close()
    assert len(await frames_answering(gateway)) == before  # nothing garbage was recorded


@pytest.mark.anyio
async def test_after_the_fuzzing_turns_are_still_answered(gateway: Gateway, client: Client) -> None:
    raw = await client.connect()
    await raw.hello()
    for text in ["\ud800".encode("utf-8", "surrogatepass").decode("utf-8", "replace"), "{", "\x00"]:
        await raw.send(text)
        assert (await raw.recv())["type"] == "error"
    await anyio.sleep(OPTIONS.settle)
    await say(gateway, "a \x00 and \U0001f600 in a turn")
    turn = await raw.recv()
    assert turn["text"] == "a \ufffd and \U0001f600 in a turn"  # made valid at admission
    await raw.send({"type": "reply", "turn": turn["turn"], "text": "🙂"})
    assert (await raw.recv())["recorded"] == "reply"


# ---------------------------------------------------------------------- the id of a message

# any JSON value, and strings over full Unicode around the length limit as well as short ones
any_id = (
    any_text
    | st.text(st.characters(exclude_categories=()), min_size=p.MAX_ID_CHARS - 2, max_size=210)
    | nested
)


def as_received(value: object) -> object:
    """``value`` as the gateway reads it from the JSON (a surrogate pair written as two code
    points arrives as the one character it encodes)."""
    return json.loads(json.dumps(value))


@pytest.mark.anyio
@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(sent=st.lists(st.tuples(st.sampled_from(p.CLIENT_TYPES), any_id), min_size=1, max_size=8))
async def test_any_id_on_any_message_is_echoed_exactly_when_it_is_valid(
    gateway: Gateway, client: Client, sent: list[tuple[str, object]]
) -> None:
    raw = await client.connect()
    await raw.hello()
    for kind, value in sent:
        await raw.send({**well_formed(kind), "id": value})
        answer = await raw.recv()  # schema-checked
        received = as_received(value)
        if p.echoable_id(received) is None:  # refused as a whole, naming the id, not echoing it
            assert (answer["code"], answer.get("re")) == ("invalid", None), (value, answer)
            assert answer["field"] in ("id", f"{kind}.id"), (value, answer)
        else:
            expected = {"event": "ack", "hello": "second_hello"}.get(kind, "not_held")
            assert answer.get("code", answer["type"]) == expected, (value, answer)
            assert answer["re"] == received, (value, answer)
    assert not raw.ws.closed
    await raw.ws.close()
