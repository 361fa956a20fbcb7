"""A batch of plain status changes read straight from a request's JSON bytes (ADR 0150).

Most of what a fleet posts to ``POST /v1/events`` is batches of status changes sent as
``kind``, ``agent`` and ``status`` (``workspace`` and a null ``at`` allowed). Reading one the
general way builds a dict per event (``json.loads``) and then reads each dict again in Python
(``parse_checked_events``): two thirds of a batch's cost to the route. msgspec reads such a
body in C into small structs, checking each field's type on the way; only the events
themselves are then made in Python.

``status_batch(raw)`` is a shortcut, never a judge: it answers only for a body it reads whole
as exactly such a batch, and ``None`` for anything else (another kind, another field, a field
of another type, an empty agent, a body that is not UTF-8 or not JSON, one event alone, any
backslash). The caller then reads the body the general way, which accepts or refuses it and
names what was wrong, as it always did. Where this answers, the general way reads the same
events (tests/foundation/test_event_batches.py): msgspec and ``json`` agree on those bodies
(strict UTF-8, no raw control character in a string, the last of a repeated key), and a body
with no backslash holds no ``\\u`` escape, the only way a lone surrogate or a NUL enters a
string (ADR 0070).
"""

from typing import Annotated, Any, Literal

import msgspec

from bridge_core.events import FleetEvent, StatusChanged, _new_event, _UnfrozenStatus

__all__ = ["status_batch"]

_NonEmpty = Annotated[str, msgspec.Meta(min_length=1)]


class _PlainStatus(msgspec.Struct, forbid_unknown_fields=True):
    kind: Literal["StatusChanged"]
    agent: _NonEmpty
    status: _NonEmpty
    workspace: str | None = None
    at: None = None


# Made once: a decoder is a compiled description of the shape, like a compiled pattern. A field
# of the wrong type or value raises ValidationError, which is a DecodeError.
_DECODER = msgspec.json.Decoder(list[_PlainStatus])


def status_batch(raw: bytes) -> list[FleetEvent] | None:
    """The events of ``raw`` when it is an array of plain status changes, else ``None``."""
    if b"\\" in raw:  # an escape is the general reader's (ADR 0070)
        return None
    try:
        plain = _DECODER.decode(raw)
    except msgspec.DecodeError:
        return None
    events: list[FleetEvent] = []
    append = events.append
    new, unfrozen, status_changed = _new_event, _UnfrozenStatus, StatusChanged
    for item in plain:
        made: Any = new(unfrozen)  # as parse_checked_events makes one (events.py)
        made.agent = item.agent
        made.workspace = item.workspace or "default"
        made.at = None
        made.status = item.status
        made.__class__ = status_changed
        append(made)
    return events
