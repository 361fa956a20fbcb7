"""The agent socket's messages (``/v1/agents``, protocol 1): names, limits, parsing, building.

Shared by the gateway's socket (``bridge_core.runtime.agent_socket``) and the Python SDK
(``bridge_core.agent``), and documented for other languages by the JSON Schema
``docs/agent-protocol.schema.json`` (a test checks every message either side builds against it).
Standard library only: an agent process imports this without the gateway's dependencies.

Every message is one WebSocket text frame holding one JSON object with a ``type``:

client to gateway   ``hello`` ``reply`` ``busy`` ``decline`` ``error`` ``event``
                    ``stream`` (a delta of a streamed reply) ``final`` (its end; ``text``,
                    when given, is the whole final text)
gateway to client   ``hello`` ``turn`` ``ack`` ``error``

``parse_client_message`` raises ``ProtocolError`` whose ``code`` (one of ``ERROR_CODES``) and
message name what was wrong and where; the gateway sends it back as an ``error`` message.

Every client message may carry an ``id`` (``echoable_id``: a string of at most ``MAX_ID_CHARS``
characters, no NUL, no lone surrogate); the gateway echoes it as ``re`` in the ``ack`` or
``error`` answering that message, so a client correlates each answer exactly. Its ``hello``
says so (``message_ids``); a gateway from before the addition accepts an ``id`` on ``event``
only and refuses it elsewhere as an unknown field.

Exception hierarchy::

    ProtocolError     a message that does not follow the protocol (``code``, ``field``, ``turn``)
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bridge_core.errors import BridgeError
from bridge_core.events import finite_number
from bridge_core.text import text_problem, valid_text

__all__ = [
    "CLIENT_TYPES",
    "CLOSE_GOING_AWAY",
    "CLOSE_NORMAL",
    "CLOSE_NO_HELLO",
    "CLOSE_POLICY",
    "CLOSE_TOO_BIG",
    "ERROR_CODES",
    "MAX_CHANNELS",
    "MAX_CONCURRENCY",
    "MAX_ID_CHARS",
    "MAX_MESSAGE_BYTES",
    "MAX_NAME_CHARS",
    "PATH",
    "PROTOCOL_VERSION",
    "RESERVED_TYPES",
    "SERVER_TYPES",
    "Ack",
    "Busy",
    "ClientError",
    "ClientMessage",
    "Decline",
    "EventPost",
    "Hello",
    "HistoryEntry",
    "ProtocolError",
    "Reply",
    "ServerError",
    "ServerHello",
    "ServerMessage",
    "Streamed",
    "TurnMessage",
    "check_text",
    "echoable_id",
    "encode",
    "parse_client_message",
    "parse_server_message",
    "to_json",
]

PROTOCOL_VERSION = 1
PATH = "/v1/agents"

MAX_MESSAGE_BYTES = 256 * 1024
"""The largest message either side accepts (UTF-8 bytes of the frame's text)."""
MAX_CHANNELS = 64
MAX_CONCURRENCY = 1024
MAX_NAME_CHARS = 200
MAX_ID_CHARS = MAX_NAME_CHARS
"""The longest ``id`` a client message may carry (``event``'s limit when only it had one)."""
MAX_DEPTH = 32
"""How deeply a message's JSON may nest (a fleet event batch needs three levels)."""

CLIENT_TYPES = ("hello", "reply", "busy", "decline", "error", "event", "stream", "final")
SERVER_TYPES = ("hello", "turn", "ack", "error")
RESERVED_TYPES: tuple[str, ...] = ()  # stream and final were reserved; both are implemented now

CLOSE_NORMAL = 1000
"""Either side is done; from the client, a graceful leave of every group it joined."""
CLOSE_GOING_AWAY = 1001
"""The gateway is stopping (or the client is): a graceful leave too."""
CLOSE_POLICY = 1008
"""The gateway closed a connection that kept sending messages it could not use."""
CLOSE_TOO_BIG = 1009
"""A frame beyond the gateway's hard limit (the socket cannot read past it)."""
CLOSE_NO_HELLO = 4000
"""No valid ``hello`` arrived within the gateway's hello timeout."""

ERROR_CODES = {
    "malformed": "the frame is not a JSON object (or not UTF-8 text)",
    "too_large": "the frame is larger than the limit",
    "unknown_type": "the message's type is not one of the protocol's",
    "invalid": "a field is missing, of the wrong type, or out of range",
    "hello_first": "a message other than hello arrived before hello",
    "second_hello": "hello was sent twice on one connection",
    "unknown_channel": "hello names a channel the gateway does not serve",
    "wrong_group": "hello names a group other than the channel's",
    "not_held": "a reply (busy, decline, error) to a turn this connection does not hold",
    "not_supported": "a reserved message type this gateway does not implement yet",
    "rejected": "the gateway could not accept the message (an event it refused)",
    "unavailable": "the gateway could not record the answer or failed on it; send it again",
    "shutting_down": "the gateway is stopping",
}


class ProtocolError(BridgeError, ValueError):
    """A message that breaks the protocol; ``code`` is one of ``ERROR_CODES``."""

    def __init__(
        self, code: str, message: str, *, field: str | None = None, turn: str | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = field
        self.turn = turn


def check_text(value: str, *, where: str) -> str:
    """``value`` if every stored backend can hold it; ``ProtocolError`` naming the first problem.

    JSON can carry lone surrogates (``"\\ud800"``) that no UTF-8 store can write, and NUL, which
    PostgreSQL text refuses; both are refused here (``bridge_core.text.text_problem``, the rule
    the HTTP API applies, ADR 0070) rather than failing at the ledger.
    """
    problem = text_problem(value)
    if problem is not None:
        raise ProtocolError("invalid", f"{where}: {problem}", field=where)
    return value


def echoable_id(value: object) -> str | None:
    """``value`` if it is a valid message ``id``, so an answer may echo it as ``re``; else
    ``None``: a string of at most ``MAX_ID_CHARS`` characters without NUL or a lone surrogate
    (empty allowed, as ``event`` always allowed it). The parser refuses any other ``id``."""
    if isinstance(value, str) and len(value) <= MAX_ID_CHARS and text_problem(value) is None:
        return value
    return None


# ---------------------------------------------------------------------- client messages


@dataclass(frozen=True, slots=True)
class Hello:
    group: str
    channels: tuple[str, ...]
    name: str
    concurrency: int = 1
    protocol: int = PROTOCOL_VERSION
    id: str | None = None
    type: str = "hello"


@dataclass(frozen=True, slots=True)
class Reply:
    turn: str
    text: str
    id: str | None = None
    type: str = "reply"


@dataclass(frozen=True, slots=True)
class Busy:
    turn: str
    notice: str | None = None
    id: str | None = None
    type: str = "busy"


@dataclass(frozen=True, slots=True)
class Decline:
    turn: str
    reason: str | None = None
    id: str | None = None
    type: str = "decline"


@dataclass(frozen=True, slots=True)
class ClientError:
    """The agent failed on ``turn``: it stays unanswered (pending) in the log."""

    turn: str
    message: str
    id: str | None = None
    type: str = "error"


@dataclass(frozen=True, slots=True)
class EventPost:
    """Fleet events, the same JSON as ``POST /v1/events`` (one object or an array)."""

    event: Any
    id: str | None = None
    type: str = "event"


@dataclass(frozen=True, slots=True)
class Streamed:
    """``stream`` (a delta of the reply, appended to the text so far) or ``final`` (the end of
    the stream; a non-empty ``text`` is the whole final text, replacing the deltas')."""

    type: str
    turn: str
    text: str
    id: str | None = None


ClientMessage = Hello | Reply | Busy | Decline | ClientError | EventPost | Streamed


def _depth_ok(value: Any, limit: int) -> bool:
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > limit:
                return False
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return True


def _load(raw: str | bytes, *, max_bytes: int) -> dict[str, Any]:
    if isinstance(raw, bytes):
        raise ProtocolError("malformed", "binary frames are not used; send JSON in a text frame")
    size = len(raw.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise ProtocolError(
            "too_large", f"message of {size} bytes is larger than the limit of {max_bytes} bytes"
        )
    try:
        data = json.loads(raw, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise ProtocolError(
            "malformed", f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except (ValueError, RecursionError) as exc:  # a 5,000-digit number, nesting 10,000 deep
        raise ProtocolError("malformed", f"JSON the gateway will not read: {exc}") from None
    if not isinstance(data, dict):
        raise ProtocolError("malformed", f"a message is a JSON object, got {type(data).__name__}")
    if not _depth_ok(data, MAX_DEPTH):
        raise ProtocolError("malformed", f"JSON nested deeper than {MAX_DEPTH} levels")
    return data


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


@dataclass(slots=True)
class _Fields:
    """Typed reads of one message's fields, each error naming the field (``id`` is allowed on
    every message)."""

    data: Mapping[str, Any]
    kind: str
    allowed: frozenset[str]
    turn: str | None = field(default=None)

    def __post_init__(self) -> None:
        self.allowed |= {"id"}  # so each kind's field list names only its own fields
        for key in self.data:
            if key not in self.allowed:
                expected = ", ".join(sorted(self.allowed - {"type"}))
                raise ProtocolError(  # the key as text an error frame can carry, and short
                    "invalid",
                    f"{self.kind}: unknown field {key[:MAX_NAME_CHARS]!r}; expected {expected}",
                    field=valid_text(key[:MAX_NAME_CHARS]),
                    turn=self.turn,
                )

    def _fail(self, name: str, problem: str) -> ProtocolError:
        return ProtocolError(
            "invalid", f"{self.kind}.{name}: {problem}", field=name, turn=self.turn
        )

    def text(self, name: str, *, required: bool, max_chars: int | None = None) -> str | None:
        if name not in self.data:
            if required:
                raise self._fail(name, "is required (a string)")
            return None
        value = self.data[name]
        if not isinstance(value, str):  # null too: leave an optional field out instead
            shown = "null" if value is None else type(value).__name__
            raise self._fail(name, f"must be a string, got {shown}")
        if required and not value.strip():
            raise self._fail(name, "must not be empty")
        if max_chars is not None and len(value) > max_chars:
            raise self._fail(name, f"longer than {max_chars} characters")
        try:
            return check_text(value, where=f"{self.kind}.{name}")
        except ProtocolError as exc:
            exc.turn = self.turn
            raise

    def message_id(self) -> str | None:
        """The message's ``id`` (``echoable_id``'s rule), or ``None`` when it has none."""
        return self.text("id", required=False, max_chars=MAX_ID_CHARS)

    def integer(self, name: str, *, default: int, low: int, high: int) -> int:
        value = self.data.get(name, default)
        if isinstance(value, float) and value.is_integer():  # JSON does not tell 2.0 from 2
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise self._fail(name, f"must be an integer from {low} to {high}, got {value!r}")
        return value


def _turn_id(data: Mapping[str, Any]) -> str | None:
    value = data.get("turn")
    return value if isinstance(value, str) and len(value) <= MAX_NAME_CHARS else None


def parse_client_message(raw: str | bytes, *, max_bytes: int = MAX_MESSAGE_BYTES) -> ClientMessage:
    """One client frame's message, or ``ProtocolError`` naming what was wrong."""
    data = _load(raw, max_bytes=max_bytes)
    kind = data.get("type")
    if not isinstance(kind, str):
        raise ProtocolError(
            "invalid", "a message needs a string field 'type'", field="type", turn=_turn_id(data)
        )
    if kind not in CLIENT_TYPES:
        shown = kind if len(kind) <= 40 else kind[:40] + "…"
        raise ProtocolError(
            "unknown_type",
            f"unknown message type {shown!r}; a client sends {', '.join(CLIENT_TYPES)}",
            field="type",
            turn=_turn_id(data),
        )
    if kind == "hello":
        f = _Fields(
            data, kind, frozenset({"type", "protocol", "group", "channels", "name", "concurrency"})
        )
        protocol = f.integer("protocol", default=PROTOCOL_VERSION, low=1, high=1_000_000)
        if protocol != PROTOCOL_VERSION:
            raise f._fail(
                "protocol", f"this gateway speaks protocol {PROTOCOL_VERSION}, not {protocol}"
            )
        channels = data.get("channels")
        if not isinstance(channels, list) or not 1 <= len(channels) <= MAX_CHANNELS:
            raise f._fail("channels", f"must be a list of 1 to {MAX_CHANNELS} channel names")
        names: list[str] = []
        for index, value in enumerate(channels):
            if not isinstance(value, str) or not value.strip() or len(value) > MAX_NAME_CHARS:
                raise f._fail(f"channels[{index}]", f"must be a channel name, got {value!r}")
            check_text(value, where=f"hello.channels[{index}]")
            if value not in names:
                names.append(value)
        group = f.text("group", required=True, max_chars=MAX_NAME_CHARS)
        name = f.text("name", required=True, max_chars=MAX_NAME_CHARS)
        assert group is not None and name is not None
        concurrency = f.integer("concurrency", default=1, low=1, high=MAX_CONCURRENCY)
        return Hello(
            group=group,
            channels=tuple(names),
            name=name,
            concurrency=concurrency,
            id=f.message_id(),
        )
    if kind == "event":
        f = _Fields(data, kind, frozenset({"type", "event"}))
        if not isinstance(data.get("event"), dict | list):
            raise f._fail("event", "is required: a fleet event object or an array of them")
        return EventPost(event=data["event"], id=f.message_id())
    turn = _turn_id(data)
    extra = {
        "reply": {"text"},
        "busy": {"notice"},
        "decline": {"reason"},
        "error": {"message"},
        "stream": {"text"},
        "final": {"text"},
    }[kind]
    f = _Fields(data, kind, frozenset({"type", "turn"} | extra), turn=turn)
    turn_id = f.text("turn", required=True, max_chars=MAX_NAME_CHARS)
    assert turn_id is not None
    message_id = f.message_id()
    if kind == "reply":
        text = f.text("text", required=True)
        assert text is not None
        return Reply(turn=turn_id, text=text, id=message_id)
    if kind == "busy":
        return Busy(turn=turn_id, notice=f.text("notice", required=False), id=message_id)
    if kind == "decline":
        return Decline(turn=turn_id, reason=f.text("reason", required=False), id=message_id)
    if kind == "error":
        message = f.text("message", required=False) or "the agent failed on this turn"
        return ClientError(turn=turn_id, message=message, id=message_id)
    text = f.text("text", required=False) or ""
    return Streamed(type=kind, turn=turn_id, text=text, id=message_id)


# ---------------------------------------------------------------------- gateway messages


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """A record of the conversation before (and including) a turn: a user ``turn`` (with its
    text) or an agent ``frame`` (that an answer was recorded, not its text)."""

    kind: str
    seq: int
    author: str | None = None
    text: str | None = None
    answers_seq: int | None = None


@dataclass(frozen=True, slots=True)
class ServerHello:
    gateway: str
    members: Mapping[str, str]
    """Channel name to the member id this connection is in that channel's group."""
    since: Mapping[str, float]
    """Channel name to the member's eligibility time (log time, epoch seconds)."""
    concurrency: int
    max_message_bytes: int = MAX_MESSAGE_BYTES
    protocol: int = PROTOCOL_VERSION
    message_ids: bool = False
    """True: the gateway takes an ``id`` on every client message and echoes it as ``re`` in the
    answer. Absent (False) from a gateway older than that, which takes an ``id`` on ``event``
    only and refuses it on any other message."""
    type: str = "hello"


@dataclass(frozen=True, slots=True)
class TurnMessage:
    turn: str
    channel: str
    conversation: str
    seq: int
    inserted_at: float
    message_id: str
    author: str
    text: str
    thread: str | None
    history: tuple[HistoryEntry, ...] = ()
    type: str = "turn"


@dataclass(frozen=True, slots=True)
class Ack:
    """A client message made durable: ``recorded`` is ``reply``, ``busy``, ``decline``,
    ``final``, or ``event`` (then ``accepted``/``ignored`` count the events). ``re`` is the
    acknowledged message's ``id``, when it had one."""

    recorded: str
    turn: str | None = None
    re: str | None = None
    obligation: str | None = None
    accepted: int | None = None
    ignored: int | None = None
    type: str = "ack"


@dataclass(frozen=True, slots=True)
class ServerError:
    """What was wrong with a client message; ``re`` is its ``id``, when it had a valid one (an
    invalid ``id`` is itself refused, naming the field ``id``)."""

    code: str
    message: str
    turn: str | None = None
    re: str | None = None
    field: str | None = None
    type: str = "error"


ServerMessage = ServerHello | TurnMessage | Ack | ServerError


def _plain(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_plain(item) for item in value]
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if hasattr(value, "__dataclass_fields__"):
        return {
            name: _plain(getattr(value, name))
            for name in value.__dataclass_fields__
            if getattr(value, name) is not None
        }
    return value


def to_json(message: ClientMessage | ServerMessage) -> dict[str, Any]:
    """The JSON object of ``message`` (fields that are ``None`` left out)."""
    out: dict[str, Any] = _plain(message)
    if isinstance(message, EventPost):  # an event body is the caller's JSON, kept as is
        out["event"] = message.event
    return out


def encode(message: ClientMessage | ServerMessage) -> str:
    """The frame text of ``message`` (ASCII JSON: valid whatever the text holds)."""
    return json.dumps(to_json(message), separators=(",", ":"), allow_nan=False)


def _need(data: Mapping[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    value = data.get(name)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise ProtocolError("invalid", f"gateway message: {name} is missing or of the wrong type")
    return value


def _optional(data: Mapping[str, Any], name: str) -> Any:
    if name in data and not isinstance(data[name], str):  # re, turn: what matches an answer
        raise ProtocolError("invalid", f"gateway message: {name} is not a string")
    return data.get(name)


def parse_server_message(
    raw: str | bytes, *, max_bytes: int = 16 * MAX_MESSAGE_BYTES
) -> ServerMessage:
    """One gateway frame's message (for clients); ``ProtocolError`` when it is not one."""
    data = _load(raw, max_bytes=max_bytes)
    kind = data.get("type")
    if kind == "turn":
        entries = data.get("history", [])
        if not isinstance(entries, list):
            raise ProtocolError("invalid", "gateway message: history is not a list")
        history = tuple(
            HistoryEntry(
                kind=_need(entry, "kind", str),
                seq=_need(entry, "seq", int),
                author=entry.get("author"),
                text=entry.get("text"),
                answers_seq=entry.get("answers_seq"),
            )
            for entry in entries
            if isinstance(entry, dict)
        )
        inserted_at = _need(data, "inserted_at", (int, float))
        return TurnMessage(
            turn=_need(data, "turn", str),
            channel=_need(data, "channel", str),
            conversation=_need(data, "conversation", str),
            seq=_need(data, "seq", int),
            inserted_at=finite_number(inserted_at) or 0.0,
            message_id=_need(data, "message_id", str),
            author=_need(data, "author", str),
            text=_need(data, "text", str),
            thread=data.get("thread"),
            history=history,
        )
    if kind == "ack":
        return Ack(
            recorded=_need(data, "recorded", str),
            turn=_optional(data, "turn"),
            re=_optional(data, "re"),
            obligation=data.get("obligation"),
            accepted=data.get("accepted"),
            ignored=data.get("ignored"),
        )
    if kind == "error":
        return ServerError(
            code=_need(data, "code", str),
            message=_need(data, "message", str),
            turn=_optional(data, "turn"),
            re=_optional(data, "re"),
            field=data.get("field"),
        )
    if kind == "hello":
        return ServerHello(
            gateway=_need(data, "gateway", str),
            members=dict(_need(data, "members", dict)),
            since=dict(_need(data, "since", dict)),
            concurrency=_need(data, "concurrency", int),
            max_message_bytes=_need(data, "max_message_bytes", int),
            protocol=_need(data, "protocol", int),
            message_ids=data.get("message_ids") is True,
        )
    raise ProtocolError("unknown_type", f"unknown gateway message type {kind!r}", field="type")
