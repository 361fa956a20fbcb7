"""Teams conversations as the core sees them, and inbound activities as ``InboundMessage``.

A Teams channel conversation id is ``19:…@thread.tacv2``; a reply chain in it is the same id with
``;messageid=<root activity id>``. The core's ``channel`` is the bare id and its ``thread`` the
root id, so ``conversation_id`` and ``split_conversation_id`` go back and forth.

Conversation references (service URL, conversation, bot, tenant) are what a proactive send
needs; ``ReferenceStore`` keeps the latest one per channel in the core's key-value store so sends
still work after a restart.
"""

from __future__ import annotations

import json
from typing import Any

from botbuilder.core import TurnContext
from botbuilder.schema import Activity, ActivityTypes, ConversationReference

from bridge_core import InboundMessage, KeyValueStore
from bridge_teams.activity_json import PlainActivity

__all__ = [
    "THREAD_MARKER",
    "ReferenceStore",
    "conversation_id",
    "inbound_from_activity",
    "split_conversation_id",
]

THREAD_MARKER = ";messageid="


def conversation_id(channel: str, thread: str | None) -> str:
    return f"{channel}{THREAD_MARKER}{thread}" if thread else channel


def split_conversation_id(value: str) -> tuple[str, str | None]:
    channel, marker, thread = value.partition(THREAD_MARKER)
    return channel, (thread if marker else None)


def _is_bot(activity: Activity) -> bool:
    author = activity.from_property
    if author is None:
        return True
    recipient = activity.recipient
    return (
        author.role == "bot"
        or str(author.id or "").startswith("28:")  # Teams bot ids
        or (recipient is not None and author.id == recipient.id)
    )


def inbound_from_activity(activity: Activity, *, profile: str) -> InboundMessage | None:
    """The core's form of a message activity; ``None`` for other activity types."""
    if activity.type != ActivityTypes.message or activity.id is None:
        return None
    channel, thread = split_conversation_id(activity.conversation.id)
    author = activity.from_property
    # "<at>Bridge</at> hello" -> "hello": the mention of the bot is addressing, not content.
    text = TurnContext.remove_recipient_mention(activity) if activity.recipient else activity.text
    at = activity.timestamp.timestamp() if activity.timestamp is not None else 0.0
    return InboundMessage(
        message_id=str(activity.id),
        channel=channel,
        author=str(author.aad_object_id or author.id) if author is not None else "",
        text=(text or "").strip(),
        at=at,
        thread=thread,
        author_is_bot=_is_bot(activity),
        platform="teams",
        profile=profile,
        extra={
            "author_name": author.name if author is not None else None,
            "tenant_id": activity.conversation.tenant_id,
            "service_url": activity.service_url,
        },
    )


class ReferenceStore:
    """The latest conversation reference per channel, in the core's key-value store."""

    def __init__(self, kv: KeyValueStore | None, *, profile: str) -> None:
        self._kv = kv
        self._namespace = f"teams:{profile}:references"
        # What this process last stored per channel: a busy channel's every message carries the
        # same reference, and rewriting it each time costs more than checking the message's JWT.
        self._stored: dict[str, tuple[object, ...]] = {}

    async def remember(self, activity: Activity) -> str | None:
        """Store the reference of an inbound activity under its channel; the channel id."""
        if self._kv is None or activity.conversation is None or not activity.service_url:
            return None
        channel, _ = split_conversation_id(activity.conversation.id)
        recipient = activity.recipient
        fingerprint = (
            activity.service_url,
            activity.channel_id,
            activity.conversation.tenant_id,
            recipient.id if recipient is not None else None,
        )
        if self._stored.get(channel) == fingerprint:
            return channel
        await self._store(channel, activity, fingerprint)
        return channel

    async def remember_plain(self, plain: PlainActivity, body: dict[str, Any]) -> None:
        """``remember`` for an activity read plainly: the SDK reads the body only when the
        reference changed (the first message of a channel, a new service URL)."""
        if self._kv is None or not plain.has_conversation or not plain.service_url:
            return
        assert plain.conversation_id is not None  # the endpoint refused a conversation without
        channel, _ = split_conversation_id(plain.conversation_id)
        recipient = plain.recipient
        fingerprint = (
            plain.service_url,
            plain.channel_id,
            plain.tenant_id,
            recipient.id if recipient is not None else None,
        )
        if self._stored.get(channel) == fingerprint:
            return
        await self._store(channel, Activity.deserialize(body), fingerprint)

    async def _store(
        self, channel: str, activity: Activity, fingerprint: tuple[object, ...]
    ) -> None:
        assert self._kv is not None
        reference = TurnContext.get_conversation_reference(activity)
        reference.conversation.id = channel
        reference.activity_id = None  # a proactive send is not a reply to this activity
        reference.user = None
        await self._kv.put(
            self._namespace, channel, json.dumps(reference.serialize()).encode("utf-8")
        )
        self._stored[channel] = fingerprint

    async def recall(self, channel: str) -> ConversationReference | None:
        if self._kv is None:
            return None
        raw = await self._kv.get(self._namespace, channel)
        if raw is None:
            return None
        reference: ConversationReference = ConversationReference.deserialize(
            json.loads(raw.decode("utf-8"))
        )
        return reference
