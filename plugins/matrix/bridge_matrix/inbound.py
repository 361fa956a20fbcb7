"""Turning ``/sync`` timeline events into ``InboundMessage``\\ s, and where ``since`` is kept.

A Matrix thread is a relation (``m.thread``) to its root event, inside the room; the core's
conversation is the room and the thread root, so a message in a thread reads as
``channel=<room>, thread=<root event id>``. The event id is the platform's stable message id: a
replayed batch repeats it, and the core's dedup drops the repeat.

A room the bot joins while running arrives with its recent history (Synapse marks that timeline
``limited``); what came before the bot's own join is dropped, as on a first start.

Matrix has no "bot" flag on accounts. Messages of type ``m.notice`` are, by the spec, what
automated clients send, and are marked ``author_is_bot``; so are the bridge's own events. Edits
(``m.replace``) are never new turns.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from bridge_core import InboundMessage, KeyValueStore

__all__ = [
    "SYNC_FILTER",
    "SYNC_NAMESPACE",
    "RoomTimeline",
    "SyncPosition",
    "after_own_arrival",
    "inbound_from_event",
    "is_own_arrival",
    "joined_timelines",
    "kicks_in",
    "redacted_by",
]

SYNC_NAMESPACE = "bridge_matrix.sync"

# Only what becomes a turn: room messages and membership (to see the bot kicked); no presence,
# account data, typing or receipts.
SYNC_FILTER: dict[str, Any] = {
    "presence": {"types": []},
    "account_data": {"types": []},
    "room": {
        "timeline": {
            "types": ["m.room.message", "m.room.member", "m.room.redaction"],
            "limit": 100,
        },
        "state": {"types": ["m.room.member"], "lazy_load_members": True},
        "ephemeral": {"types": []},
        "account_data": {"types": []},
    },
}

USER_MSGTYPES = frozenset({"m.text", "m.emote"})


class SyncPosition:
    """The ``next_batch`` token of the last ``/sync`` whose events all reached the core, in the
    core's key-value store, keyed by user and device: a restart resumes there (no replay flood,
    no gap). Without a store it lives in memory only."""

    def __init__(self, kv: KeyValueStore | None, *, user_id: str, device_id: str | None) -> None:
        self._kv = kv
        self._key = f"{user_id}|{device_id or ''}"
        self._memory: str | None = None

    async def load(self) -> str | None:
        if self._kv is None:
            return self._memory
        raw = await self._kv.get(SYNC_NAMESPACE, self._key)
        return raw.decode() if raw is not None else None

    async def save(self, token: str) -> None:
        self._memory = token
        if self._kv is not None:
            await self._kv.put(SYNC_NAMESPACE, self._key, token.encode())


@dataclass(frozen=True, slots=True)
class RoomTimeline:
    """One joined room's timeline in a ``/sync`` answer. ``limited`` says the server left out
    events between the request's ``since`` and the first of ``events``; ``prev_batch`` is where
    ``/messages`` reads them from."""

    room_id: str
    events: list[dict[str, Any]]
    limited: bool
    prev_batch: str | None


def joined_timelines(sync: dict[str, Any]) -> Iterator[RoomTimeline]:
    """The timeline of every joined room, its events in the server's order (oldest first)."""
    joined = sync.get("rooms", {}).get("join", {})
    for room_id, room in joined.items():
        timeline = room.get("timeline", {}) if isinstance(room, dict) else {}
        events = [e for e in timeline.get("events", []) if isinstance(e, dict)]
        prev_batch = timeline.get("prev_batch")
        yield RoomTimeline(
            room_id=room_id,
            events=events,
            limited=timeline.get("limited") is True,
            prev_batch=prev_batch if isinstance(prev_batch, str) else None,
        )


def is_own_arrival(event: dict[str, Any], user_id: str) -> bool:
    """Whether ``event`` is ``user_id`` joining a room it was not joined to (a join over a join
    is a new display name or avatar, not an arrival)."""
    if event.get("type") != "m.room.member" or event.get("state_key") != user_id:
        return False
    content = event.get("content")
    if not isinstance(content, dict) or content.get("membership") != "join":
        return False
    # The spec moved prev_content into unsigned; older servers put it at the top level.
    unsigned = event.get("unsigned")
    before = unsigned.get("prev_content") if isinstance(unsigned, dict) else None
    if not isinstance(before, dict):
        before = event.get("prev_content")
    return not (isinstance(before, dict) and before.get("membership") == "join")


def after_own_arrival(events: list[dict[str, Any]], user_id: str) -> list[dict[str, Any]] | None:
    """The events after the bot's latest arrival among ``events``, or ``None`` when it did not
    arrive in them. A homeserver shows a room the bot just joined with its recent history; that
    was said before the bot was there, so it is history, not turns (ADR 0083)."""
    for index in range(len(events) - 1, -1, -1):
        if is_own_arrival(events[index], user_id):
            return events[index + 1 :]
    return None


def kicks_in(sync: dict[str, Any], user_id: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(room_id, membership event)`` for each room the bot left, was kicked or banned from."""
    for room_id, room in sync.get("rooms", {}).get("leave", {}).items():
        for event in room.get("timeline", {}).get("events", []):
            if event.get("type") == "m.room.member" and event.get("state_key") == user_id:
                yield room_id, event


def redacted_by(event: dict[str, Any]) -> str | None:
    """The event id an ``m.room.redaction`` removes (``redacts`` at the top level in older room
    versions, in the content since version 11), else ``None``."""
    if event.get("type") != "m.room.redaction":
        return None
    target = event.get("redacts")
    if not isinstance(target, str):
        content = event.get("content")
        target = content.get("redacts") if isinstance(content, dict) else None
    return target if isinstance(target, str) else None


def inbound_from_event(
    room_id: str, event: dict[str, Any], *, profile: str, own_user_id: str
) -> InboundMessage | None:
    """The core's form of a room message, or ``None`` for events that are not chat (membership,
    edits, redacted events, malformed content)."""
    if event.get("type") != "m.room.message":
        return None
    content = event.get("content")
    event_id, sender = event.get("event_id"), event.get("sender")
    if (
        not isinstance(content, dict)
        or not isinstance(event_id, str)
        or not isinstance(sender, str)
    ):
        return None
    msgtype, body = content.get("msgtype"), content.get("body")
    if not isinstance(body, str) or msgtype not in (*USER_MSGTYPES, "m.notice"):
        return None
    relation = content.get("m.relates_to")
    thread: str | None = None
    if isinstance(relation, dict):
        if relation.get("rel_type") == "m.replace":
            return None
        if relation.get("rel_type") == "m.thread" and isinstance(relation.get("event_id"), str):
            thread = relation["event_id"]
    stamp = event.get("origin_server_ts")
    return InboundMessage(
        message_id=event_id,
        channel=room_id,
        author=sender,
        text=body,
        at=stamp / 1000.0 if isinstance(stamp, int | float) else 0.0,
        thread=thread,
        author_is_bot=sender == own_user_id or msgtype == "m.notice",
        platform="matrix",
        profile=profile,
        extra={"msgtype": msgtype},
    )
