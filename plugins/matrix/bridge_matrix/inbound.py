"""Turning ``/sync`` timeline events into ``InboundMessage``\\ s, and where ``since`` is kept.

A Matrix thread is a relation (``m.thread``) to its root event, inside the room; the core's
conversation is the room and the thread root, so a message in a thread reads as
``channel=<room>, thread=<root event id>``. The event id is the platform's stable message id: a
replayed batch repeats it, and the core's dedup drops the repeat.

Matrix has no "bot" flag on accounts. Messages of type ``m.notice`` are, by the spec, what
automated clients send, and are marked ``author_is_bot``; so are the bridge's own events. Edits
(``m.replace``) are never new turns.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from bridge_core import InboundMessage, KeyValueStore

__all__ = [
    "SYNC_FILTER",
    "SYNC_NAMESPACE",
    "SyncPosition",
    "inbound_from_event",
    "kicks_in",
    "redacted_by",
    "timeline_events",
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


def timeline_events(sync: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(room_id, event)`` for every timeline event of joined rooms, in the server's order."""
    joined = sync.get("rooms", {}).get("join", {})
    for room_id, room in joined.items():
        for event in room.get("timeline", {}).get("events", []):
            if isinstance(event, dict):
                yield room_id, event


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
