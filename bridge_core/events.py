"""Fleet events: what a fleet of agents reports, and their JSON form.

Every event names its ``agent`` and ``workspace``. ``AgentSpawned``, ``StatusChanged``,
``AgentFinished`` and ``AgentGone`` notify by default; the others (``Output``, ``ToolStarted``,
``ToolFinished``, ``AgentInit``, ``StorePersistFailed``, ``RepoHealth``) and kinds this version
does not know parse into ``UnknownEvent`` or their own class and are ignored by default, never
rejected: a newer fleet must not break an older gateway.

``parse_event`` raises ``EventError`` naming the field that was wrong, a string that is not
Unicode text (a lone surrogate) or holds a NUL included, at any depth (ADR 0070): whichever
boundary an event enters by (the HTTP API, an event file, ``simulate``), it is refused there.
"""

from __future__ import annotations

import enum
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, cast

from bridge_core.errors import BridgeError
from bridge_core.text import find_invalid_text

__all__ = [
    "EVENT_KINDS",
    "NOTIFYING_KINDS",
    "AgentFinished",
    "AgentGone",
    "AgentInit",
    "AgentSpawned",
    "EventError",
    "FleetEvent",
    "Outcome",
    "Output",
    "RepoHealth",
    "StatusChanged",
    "StorePersistFailed",
    "ToolFinished",
    "ToolStarted",
    "UnknownEvent",
    "event_to_json",
    "finite_number",
    "parse_checked_event",
    "parse_checked_events",
    "parse_event",
    "parse_event_line",
]


class EventError(BridgeError, ValueError):
    """A fleet event that cannot be read; ``field`` names what was wrong, ``index`` which event
    of a batch it was (``parse_checked_events``; ``None`` for one event read alone)."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(f"{field_name}: {message}")
        self.field = field_name
        self.message = message
        self.index: int | None = None


class Outcome(enum.Enum):
    DONE = "done"
    FAILED = "failed"
    CRASHED = "crashed"
    KILLED = "killed"

    @property
    def is_failure(self) -> bool:
        return self in (Outcome.FAILED, Outcome.CRASHED)


@dataclass(frozen=True, slots=True)
class FleetEvent:
    agent: str
    workspace: str = "default"
    at: float | None = None  # the fleet's timestamp (epoch s), informational only

    kind: ClassVar[str] = "FleetEvent"


@dataclass(frozen=True, slots=True)
class AgentSpawned(FleetEvent):
    title: str = ""
    kind: ClassVar[str] = "AgentSpawned"


@dataclass(frozen=True, slots=True)
class StatusChanged(FleetEvent):
    status: str = ""
    kind: ClassVar[str] = "StatusChanged"


@dataclass(frozen=True, slots=True)
class AgentFinished(FleetEvent):
    outcome: Outcome = Outcome.DONE
    cost: float = 0.0
    turns: int = 0
    kind: ClassVar[str] = "AgentFinished"


@dataclass(frozen=True, slots=True)
class AgentGone(FleetEvent):
    reason: str = ""
    kind: ClassVar[str] = "AgentGone"


@dataclass(frozen=True, slots=True)
class Output(FleetEvent):
    text: str = ""
    kind: ClassVar[str] = "Output"


@dataclass(frozen=True, slots=True)
class ToolStarted(FleetEvent):
    tool: str = ""
    kind: ClassVar[str] = "ToolStarted"


@dataclass(frozen=True, slots=True)
class ToolFinished(FleetEvent):
    tool: str = ""
    ok: bool = True
    kind: ClassVar[str] = "ToolFinished"


@dataclass(frozen=True, slots=True)
class AgentInit(FleetEvent):
    kind: ClassVar[str] = "AgentInit"


@dataclass(frozen=True, slots=True)
class StorePersistFailed(FleetEvent):
    error: str = ""
    kind: ClassVar[str] = "StorePersistFailed"


@dataclass(frozen=True, slots=True)
class RepoHealth(FleetEvent):
    status: str = ""
    kind: ClassVar[str] = "RepoHealth"


@dataclass(frozen=True, slots=True)
class UnknownEvent(FleetEvent):
    """A kind this version does not know: accepted, kept, and ignored by default."""

    unknown_kind: str = ""
    data: Mapping[str, Any] = field(default_factory=dict, compare=False)
    kind: ClassVar[str] = "Unknown"


_KNOWN: dict[str, type[FleetEvent]] = {
    cls.kind: cls
    for cls in (
        AgentSpawned,
        StatusChanged,
        AgentFinished,
        AgentGone,
        Output,
        ToolStarted,
        ToolFinished,
        AgentInit,
        StorePersistFailed,
        RepoHealth,
    )
}

# A StatusChanged made by filling its slots: a frozen dataclass's ``__init__`` stores each field
# through ``object.__setattr__``, which was most of the cost of reading the bulk of a fleet's
# traffic over HTTP. It is made as an ``_UnfrozenStatus``, a twin with the same slots and plain
# attribute stores, and then given its class (CPython allows it between two classes that add the
# same slots to the same base): the same object one ``__init__`` makes, of the same class, every
# field set, equal, with the same hash (tests/foundation/test_events_json.py), for about half the
# instructions of storing through each slot's descriptor (the way before: four calls that each
# pack their arguments in a tuple) and a third of ``__init__``'s. The names are checked here so
# a new field cannot be left unset, and one event is made at import, so that a layout the class
# swap refuses fails at import, not in a request.
if tuple(f.name for f in fields(StatusChanged)) != ("agent", "workspace", "at", "status"):
    raise TypeError("StatusChanged's fields changed: update _UnfrozenStatus")  # pragma: no cover


class _UnfrozenStatus(FleetEvent):
    """StatusChanged's layout with plain stores; seen only while one is being made."""

    __slots__ = ("status",)
    status: str
    # What it is about to become: whatever lists the kinds of FleetEvent's subclasses (the
    # config's ``kinds`` filter) sees no kind of its own.
    kind: ClassVar[str] = "StatusChanged"
    # Both, so the class keeps CPython's own attribute setter (a store is then a slot store).
    __setattr__ = object.__setattr__
    __delattr__ = object.__delattr__


_new_event = object.__new__


def _status_changed(agent: str, workspace: str, at: float | None, status: str) -> StatusChanged:
    event: Any = _new_event(_UnfrozenStatus)
    event.agent = agent
    event.workspace = workspace
    event.at = at
    event.status = status
    event.__class__ = StatusChanged
    return cast(StatusChanged, event)


if _status_changed("a", "w", None, "s") != StatusChanged("a", "w", None, "s"):
    raise TypeError("_status_changed does not make a StatusChanged")  # pragma: no cover


EVENT_KINDS: frozenset[str] = frozenset(_KNOWN)
"""Every kind a fleet sends that has its own event class (not ``UnknownEvent``'s)."""

NOTIFYING_KINDS: frozenset[str] = frozenset(
    {"AgentSpawned", "StatusChanged", "AgentFinished", "AgentGone"}
)


def _text(data: Mapping[str, Any], name: str, *, required: bool = False, default: str = "") -> str:
    value = data.get(name)
    if value is None:
        if required:
            raise EventError(name, "is required (a non-empty string)")
        return default
    if not isinstance(value, str):
        raise EventError(name, f"must be a string, got {type(value).__name__}")
    if required and not value:
        raise EventError(name, "must not be empty")
    return value


def finite_number(value: object) -> float | None:
    """``value`` as a float if it is a JSON number (not a bool) of finite value, else ``None``.
    JSON allows integers of any length; one too large for a float is not finite here, where
    ``math.isfinite`` would raise ``OverflowError``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _number(data: Mapping[str, Any], name: str, default: float | None) -> float | None:
    value = data.get(name)
    if value is None:
        return default
    number = finite_number(value)
    if number is None:
        raise EventError(name, f"must be a finite number, got {value!r:.40}")
    return number


def parse_event(data: Any) -> FleetEvent:
    """Read one event from its JSON form (a mapping with ``kind`` and ``agent``)."""
    if not isinstance(data, Mapping):
        raise EventError("event", f"must be a JSON object, got {type(data).__name__}")
    invalid = find_invalid_text(data)
    if invalid is not None:
        raise EventError(invalid.field, invalid.reason)
    return parse_checked_event(data)


def parse_checked_event(data: Any) -> FleetEvent:
    """``parse_event`` for a value whose strings the caller already checked with
    ``find_invalid_text`` (the HTTP API checks a whole batch once, not once per event).

    The same fields are read and refused with the same errors. Each field is taken as it is
    when it is what a fleet nearly always sends (a non-empty ``str``); anything else goes
    through the full check, which accepts it or raises ``EventError`` naming the field.
    """
    if type(data) is not dict and not isinstance(data, Mapping):
        raise EventError("event", f"must be a JSON object, got {type(data).__name__}")
    get = data.get
    kind = get("kind")
    if type(kind) is not str or not kind:
        kind = _text(data, "kind", required=True)
    agent = get("agent")
    if type(agent) is not str or not agent:
        agent = _text(data, "agent", required=True)
    workspace = get("workspace")
    if type(workspace) is not str:
        workspace = _text(data, "workspace", default="default")
    workspace = workspace or "default"
    at = get("at")
    if at is not None:
        at = _number(data, "at", None)
    cls = _KNOWN.get(kind)
    if cls is StatusChanged:
        status = get("status")
        if type(status) is not str or not status:
            status = _text(data, "status", required=True)
        return _status_changed(agent, workspace, at, status)
    if cls is None:
        extra = {k: v for k, v in data.items() if k not in ("kind", "agent", "workspace", "at")}
        return UnknownEvent(agent, workspace, at, unknown_kind=kind, data=extra)
    if cls is AgentSpawned:
        return AgentSpawned(agent, workspace, at, title=_text(data, "title"))
    if cls is AgentFinished:
        raw = _text(data, "outcome", required=True)
        try:
            outcome = Outcome(raw)
        except ValueError:
            allowed = "|".join(o.value for o in Outcome)
            raise EventError("outcome", f"must be one of {allowed}, got {raw!r}") from None
        cost = _number(data, "cost", 0.0) or 0.0
        turns_value = data.get("turns", 0)
        if isinstance(turns_value, bool) or not isinstance(turns_value, int) or turns_value < 0:
            raise EventError("turns", f"must be a non-negative integer, got {turns_value!r}")
        return AgentFinished(agent, workspace, at, outcome=outcome, cost=cost, turns=turns_value)
    if cls is AgentGone:
        return AgentGone(agent, workspace, at, reason=_text(data, "reason"))
    if cls is Output:
        return Output(agent, workspace, at, text=_text(data, "text"))
    if cls is ToolStarted:
        return ToolStarted(agent, workspace, at, tool=_text(data, "tool"))
    if cls is ToolFinished:
        ok = data.get("ok", True)
        if not isinstance(ok, bool):
            raise EventError("ok", f"must be a boolean, got {ok!r}")
        return ToolFinished(agent, workspace, at, tool=_text(data, "tool"), ok=ok)
    if cls is StorePersistFailed:
        return StorePersistFailed(agent, workspace, at, error=_text(data, "error"))
    if cls is RepoHealth:
        return RepoHealth(agent, workspace, at, status=_text(data, "status"))
    return cls(agent, workspace, at)


def parse_checked_events(items: Iterable[Any]) -> list[FleetEvent]:
    """``parse_checked_event`` for each item of a batch, in order (the HTTP API's array body).

    The first item that cannot be read raises its ``EventError`` with ``index`` set to its
    position; nothing else differs from reading each item alone. The bulk of a fleet's traffic,
    a status change sent as ``kind``, ``agent`` and ``status`` (``workspace`` and a null ``at``
    allowed), is made here in the loop itself; it was half of a batch's cost to call
    ``parse_checked_event`` for it, which reads each field again to tell the kinds apart. Any
    other item, and any field that is not what a fleet nearly always sends, goes through
    ``parse_checked_event``, which reads it or names the field.
    """
    events: list[FleetEvent] = []
    append = events.append
    new, unfrozen, status_changed = _new_event, _UnfrozenStatus, StatusChanged
    for item in items:
        if type(item) is dict:
            get = item.get
            kind = get("kind")
            if kind == "StatusChanged" and type(kind) is str:
                agent = get("agent")
                status = get("status")
                workspace = get("workspace")
                if (
                    type(agent) is str
                    and agent
                    and type(status) is str
                    and status
                    and (workspace is None or type(workspace) is str)
                    and get("at") is None
                ):
                    made: Any = new(unfrozen)  # _status_changed, inlined
                    made.agent = agent
                    made.workspace = workspace or "default"
                    made.at = None
                    made.status = status
                    made.__class__ = status_changed
                    append(made)
                    continue
        try:
            append(parse_checked_event(item))
        except EventError as error:
            error.index = len(events)  # one event appended for each item before this one
            raise
    return events


def parse_event_line(line: str) -> FleetEvent:
    """Read one event from a line of JSON."""
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise EventError("json", f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    except (ValueError, RecursionError) as exc:  # nested 100,000 deep, a 5,000-digit number
        raise EventError("json", f"JSON this gateway will not read: {exc}") from None
    return parse_event(data)


def event_to_json(event: FleetEvent) -> dict[str, Any]:
    """The JSON form of an event; ``parse_event(event_to_json(e)) == e``."""
    if isinstance(event, UnknownEvent):
        out: dict[str, Any] = dict(event.data)
        out["kind"] = event.unknown_kind
    else:
        out = {"kind": event.kind}
    out["agent"] = event.agent
    out["workspace"] = event.workspace
    if event.at is not None:
        out["at"] = event.at
    if isinstance(event, AgentSpawned) and event.title:
        out["title"] = event.title
    elif isinstance(event, (StatusChanged, RepoHealth)):
        out["status"] = event.status
    elif isinstance(event, AgentFinished):
        out.update(outcome=event.outcome.value, cost=event.cost, turns=event.turns)
    elif isinstance(event, AgentGone) and event.reason:
        out["reason"] = event.reason
    elif isinstance(event, Output):
        out["text"] = event.text
    elif isinstance(event, (ToolStarted, ToolFinished)):
        out["tool"] = event.tool
        if isinstance(event, ToolFinished):
            out["ok"] = event.ok
    elif isinstance(event, StorePersistFailed):
        out["error"] = event.error
    return out
