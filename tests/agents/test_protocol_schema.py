"""The agent protocol's JSON Schema (docs/agent-protocol.schema.json) and the parser agree.

Every message either side builds validates against the schema; a client message the parser
accepts validates, and one the schema refuses the parser refuses too (text the schema cannot
express, NUL and lone surrogates, the parser refuses on its own)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge_core.agent import protocol as p
from bridge_core.testing.http_fuzz import ANY_TEXT
from bridge_core.text import text_problem

from .conftest import CLIENT, SCHEMA, assert_client_message, assert_server_message, well_formed

SERVER_EXAMPLES: list[p.ServerMessage] = [
    p.ServerHello(
        gateway="gw-a", members={"ops": "support/bot@gw-a:1f"}, since={"ops": 1.5}, concurrency=4
    ),
    p.TurnMessage(
        turn="ops/7",
        channel="ops",
        conversation="C1/u/U1",
        seq=7,
        inserted_at=1.0,
        message_id="1.0001",
        author="U1",
        text="hi",
        thread=None,
        history=(
            p.HistoryEntry(kind="turn", seq=7, author="U1", text="hi"),
            p.HistoryEntry(kind="frame", seq=6, answers_seq=5),
        ),
    ),
    p.Ack(recorded="reply", turn="ops/7", obligation="ob"),
    p.Ack(recorded="event", re="e1", accepted=2, ignored=0),
    p.ServerError(code="not_held", message="no", turn="ops/9"),
]

CLIENT_EXAMPLES: list[p.ClientMessage] = [
    p.Hello(group="support", channels=("ops",), name="bot", concurrency=2),
    p.Reply(turn="ops/7", text="hello"),
    p.Busy(turn="ops/7", notice="later"),
    p.Busy(turn="ops/7"),
    p.Decline(turn="ops/7", reason="not for me"),
    p.ClientError(turn="ops/7", message="model timed out"),
    p.EventPost(event={"kind": "AgentSpawned", "agent": "a1"}, id="e1"),
    p.EventPost(event=[{"kind": "AgentGone", "agent": "a1"}]),
    p.Streamed(type="stream", turn="ops/7", text="par"),
    p.Streamed(type="final", turn="ops/7", text="partial"),
]


@pytest.mark.parametrize("message", SERVER_EXAMPLES, ids=lambda m: m.type)
def test_every_gateway_message_type_validates_and_round_trips(message: p.ServerMessage) -> None:
    frame = p.encode(message)
    assert_server_message(frame)
    assert p.parse_server_message(frame) == message


@pytest.mark.parametrize("message", CLIENT_EXAMPLES, ids=lambda m: m.type)
def test_every_client_message_type_validates_and_parses(message: p.ClientMessage) -> None:
    frame = p.encode(message)
    assert_client_message(frame)
    assert p.parse_client_message(frame) == message


def test_the_schema_names_every_type_and_error_code() -> None:
    defs = SCHEMA["$defs"]
    client = {
        defs[ref["$ref"].split("/")[-1]]["properties"]["type"]["const"]
        for ref in defs["ClientMessage"]["oneOf"]
    }
    server = {
        defs[ref["$ref"].split("/")[-1]]["properties"]["type"]["const"]
        for ref in defs["ServerMessage"]["oneOf"]
    }
    assert client == set(p.CLIENT_TYPES)
    assert server == set(p.SERVER_TYPES)
    assert defs["ServerError"]["properties"]["code"]["enum"] == list(p.ERROR_CODES)


# ---------------------------------------------------------------------- parser and schema agree

plain_text = st.text(
    st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"), max_size=12
)
json_scalar = st.none() | st.booleans() | st.integers(-5, 2000) | plain_text
field_value = (
    json_scalar
    | st.lists(json_scalar, max_size=3)
    | st.dictionaries(plain_text, json_scalar, max_size=2)
)
FIELDS = [
    "turn",
    "text",
    "notice",
    "reason",
    "message",
    "event",
    "id",
    "group",
    "channels",
    "name",
    "concurrency",
    "protocol",
    "extra",
]


@st.composite
def client_like(draw: st.DrawFn) -> dict[str, Any]:
    data: dict[str, Any] = {"type": draw(st.sampled_from([*p.CLIENT_TYPES, "nope"]))}
    for name in draw(st.lists(st.sampled_from(FIELDS), max_size=5, unique=True)):
        data[name] = draw(field_value)
    return data


@given(client_like())
@settings(max_examples=600, deadline=None)
def test_the_parser_accepts_exactly_what_the_schema_accepts(data: dict[str, Any]) -> None:
    frame = json.dumps(data)
    try:
        p.parse_client_message(frame)
        parsed = True
    except p.ProtocolError:
        parsed = False
    schema_ok = CLIENT.is_valid(data)
    if data["type"] == "event" and isinstance(data.get("event"), dict | list):
        # event bodies are checked by the fleet event parser when they are accepted
        schema_ok = parsed
    assert parsed == schema_ok, (data, list(CLIENT.iter_errors(data))[:1])


@pytest.mark.parametrize(
    "text, problem",
    [("a\x00b", "NUL"), ("a\ud800", "lone surrogate (U+D800)")],
)
def test_text_the_schema_cannot_express_is_refused_by_name(text: str, problem: str) -> None:
    frame = json.dumps({"type": "reply", "turn": "ops/1", "text": text})
    with pytest.raises(p.ProtocolError) as caught:
        p.parse_client_message(frame)
    assert caught.value.code == "invalid" and problem in caught.value.message
    assert caught.value.field == "reply.text" and caught.value.turn == "ops/1"


# ---------------------------------------------------------------------- message ids

ID_EXAMPLES: list[p.ClientMessage] = [
    p.Hello(group="support", channels=("ops",), name="bot", id="h1"),
    p.Reply(turn="ops/7", text="hello", id="r1"),
    p.Busy(turn="ops/7", id="b1"),
    p.Decline(turn="ops/7", reason="no", id="d1"),
    p.ClientError(turn="ops/7", message="model timed out", id="e1"),
    p.EventPost(event=[], id=""),
    p.Streamed(type="stream", turn="ops/7", text="par", id="s1"),
    p.Streamed(type="final", turn="ops/7", text="", id="x" * p.MAX_ID_CHARS),
]


@pytest.mark.parametrize("message", ID_EXAMPLES, ids=lambda m: m.type)
def test_every_client_message_type_carries_an_id_the_schema_and_parser_take(
    message: p.ClientMessage,
) -> None:
    frame = p.encode(message)
    assert assert_client_message(frame)["id"] == message.id
    assert p.parse_client_message(frame) == message


@pytest.mark.parametrize(
    "message",
    [
        p.ServerHello(gateway="g", members={}, since={}, concurrency=1, message_ids=True),
        p.Ack(recorded="final", turn="ops/7", re="f1", obligation="ob"),
        p.ServerError(code="invalid", message="stream.text: no", turn="ops/7", re="s1"),
    ],
    ids=lambda m: m.type,
)
def test_the_gateway_s_answers_carry_re_and_its_hello_says_so(message: p.ServerMessage) -> None:
    frame = p.encode(message)
    assert_server_message(frame)
    assert p.parse_server_message(frame) == message


def test_a_hello_without_message_ids_is_a_gateway_older_than_ids() -> None:
    old = {
        "type": "hello",
        "protocol": 1,
        "gateway": "g",
        "members": {},
        "since": {},
        "concurrency": 1,
        "max_message_bytes": 10,
    }
    hello = p.parse_server_message(json.dumps(old))
    assert isinstance(hello, p.ServerHello) and hello.message_ids is False


any_id = (
    ANY_TEXT
    | st.text(st.characters(exclude_categories=()), min_size=p.MAX_ID_CHARS - 2, max_size=210)
    | json_scalar
    | st.lists(json_scalar, max_size=2)
)


@given(kind=st.sampled_from(p.CLIENT_TYPES), value=any_id)
@settings(max_examples=600, deadline=None)
def test_an_id_is_taken_exactly_when_it_is_valid_and_the_schema_agrees(
    kind: str, value: object
) -> None:
    frame = json.dumps({**well_formed(kind), "id": value})
    received = json.loads(frame)["id"]  # a surrogate pair in two code points arrives as one
    try:
        message = p.parse_client_message(frame)
    except p.ProtocolError as error:
        assert p.echoable_id(received) is None, (received, error)
        assert error.code == "invalid" and error.field in ("id", f"{kind}.id"), error
        assert error.message.startswith(f"{kind}.id: "), error
    else:
        assert p.echoable_id(received) == received == message.id
        assert p.parse_client_message(p.encode(message)) == message
    if not isinstance(received, str) or text_problem(received) is None:  # the schema can say it
        assert CLIENT.is_valid(json.loads(frame)) == (p.echoable_id(received) is not None)


# ---------------------------------------------------------------------- one field at a time

# what a client in another language may write where a field is expected: integers written with
# a fraction (JSON does not tell 2 from 2.0; JSON Schema's "integer" takes both), blank text
number = st.integers(-3, 1100) | st.floats(allow_nan=False, allow_infinity=False, width=32)
blank = st.sampled_from(["", " ", "\t", "\n", "\u3000", " x "])
one_value = number | number.map(float) | blank | field_value


@given(kind=st.sampled_from(p.CLIENT_TYPES), name=st.sampled_from(FIELDS), value=one_value)
@settings(max_examples=1500, deadline=None)
def test_a_well_formed_message_with_one_field_changed_parses_exactly_when_the_schema_agrees(
    kind: str, name: str, value: object
) -> None:
    data = {**well_formed(kind), name: value}
    if kind == "event" and name == "event" and isinstance(value, dict | list):
        return  # event bodies are the fleet event parser's (checked when they are accepted)
    try:
        p.parse_client_message(json.dumps(data))
        parsed = True
    except p.ProtocolError:
        parsed = False
    assert parsed == CLIENT.is_valid(data), (data, list(CLIENT.iter_errors(data))[:1])


@pytest.mark.parametrize(
    "data",
    [
        {"type": "reply", "turn": " ", "text": "x"},
        {"type": "hello", "group": "g", "channels": ["ops"], "name": "n", "concurrency": 2.0},
        {"type": "hello", "group": "g", "channels": ["ops"], "name": "n", "protocol": 1.0},
    ],
    ids=["blank turn", "concurrency 2.0", "protocol 1.0"],
)
def test_the_cases_the_schema_and_parser_disagreed_on(data: dict[str, Any]) -> None:
    try:
        message = p.parse_client_message(json.dumps(data))
    except p.ProtocolError:
        message = None
    assert (message is not None) == CLIENT.is_valid(data), data
    if isinstance(message, p.Hello):  # a number written with a fraction is the same integer
        assert type(message.concurrency) is int and type(message.protocol) is int
