"""Reading what the bridge uses of an inbound activity straight from its JSON.

botbuilder's ``Activity.deserialize`` (msrest) walks every one of the schema's forty-odd
attributes, and the accounts' and the conversation's, for each request: it was about half the
cost of the messaging endpoint (bench/bench_teams_provider.py). ``read_plain`` reads the fields
the bridge uses, and only from a body that ``Activity.deserialize`` would take as it is and read
to the same values: every schema attribute the body holds is null, or a string, a boolean, free
JSON, an ISO 8601 timestamp with its offset, an account, a conversation or a list of entities,
each shaped as the schema says (and mention entities as botbuilder's mention removal reads
them). Any other body (an attachment, a member list, a number where a string goes, a timestamp
in another form) gives ``None``, and the caller reads it with the SDK as before: no body is
read differently from before, and every body the SDK refuses is still refused by the SDK.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from botbuilder.core.re_escape import escape
from botbuilder.schema import Activity, ChannelAccount, ConversationAccount
from msrest.serialization import Deserializer

from bridge_core import InboundMessage

__all__ = ["PlainAccount", "PlainActivity", "PlainMention", "inbound_from_plain", "read_plain"]

# An ISO 8601 timestamp as the Bot Connector writes it (seconds, up to seven fraction digits, Z
# or an offset): for these, datetime.fromisoformat reads what msrest's isodate reads.
_ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,7})?(Z|[+-]\d\d:\d\d)")
_OBJECTS = Deserializer({})  # type: ignore[no-untyped-call]  # msrest reads free JSON with it
_MENTION = re.compile(r"<at(.*)>(.*?)<\/at>", re.IGNORECASE)  # botbuilder's own patterns
_EMPTY_MENTION = r"<at><\/at>"


@dataclass(frozen=True, slots=True)
class PlainAccount:
    id: str | None
    name: str | None
    aad_object_id: str | None
    role: str | None


@dataclass(frozen=True, slots=True)
class PlainMention:
    """A mention entity: who is mentioned, and the text botbuilder removes for it."""

    mentioned_id: str
    replace_text: str


@dataclass(frozen=True, slots=True)
class PlainActivity:
    type: str | None
    id: str | None
    at: float | None  # the timestamp, as a POSIX time
    service_url: str | None
    channel_id: str | None
    conversation_id: str | None
    tenant_id: str | None
    has_conversation: bool
    author: PlainAccount | None
    recipient: PlainAccount | None
    text: str | None
    mentions: tuple[PlainMention, ...]


def _simple(value: Any, kind: str) -> bool:
    """Whether msrest reads ``value`` of schema type ``kind`` as it is (or, free JSON, at all)."""
    if value is None or (kind == "str" and type(value) is str):
        return True
    if kind == "bool":
        return type(value) is bool
    if kind == "object":
        try:
            _OBJECTS.deserialize_object(value)  # type: ignore[no-untyped-call]
        except (TypeError, ValueError):
            return False
        return True
    if kind == "iso-8601":
        return type(value) is str and _timestamp(value) is not None
    return False


def _timestamp(value: str) -> float | None:
    if _ISO.fullmatch(value) is None:
        return None
    try:
        moment = datetime.fromisoformat(value)
        if not 1 <= moment.utctimetuple().tm_year <= 9999:  # msrest's own bounds
            return None
        return moment.timestamp()
    except (ValueError, OverflowError):
        return None


def _model(value: Any, attributes: Mapping[str, Mapping[str, str]]) -> dict[str, Any] | None:
    """``value``'s schema attributes by their JSON key, if each is simple; else ``None``."""
    if type(value) is not dict:
        return None
    for desc in attributes.values():
        key = desc["key"]
        if key in value and not _simple(value[key], desc["type"]):
            return None
    return value


_UNREADABLE = PlainAccount(None, None, None, None)  # an account the SDK must read


def _account(value: Any) -> PlainAccount | None:
    """The account, ``None`` for none, or ``_UNREADABLE`` when it is not plainly readable."""
    if value is None:
        return None
    data = _model(value, ChannelAccount._attribute_map)
    if data is None:
        return _UNREADABLE
    return PlainAccount(data.get("id"), data.get("name"), data.get("aadObjectId"), data.get("role"))


def _mentions(value: Any) -> tuple[PlainMention, ...] | None:
    """The mention entities as botbuilder reads them, or ``None`` when it would not plainly."""
    if value is None:
        return ()
    if type(value) is not list:
        return None
    mentions: list[PlainMention] = []
    for entity in value:
        if type(entity) is not dict or type(entity.get("type")) is not str:
            return None
        if entity["type"].lower() != "mention":
            continue
        mentioned = entity.get("mentioned")
        if type(mentioned) is not dict or type(mentioned.get("id")) is not str:
            return None
        replace_text = entity.get("text") or mentioned.get("name")
        if type(replace_text) is not str:
            return None
        mentions.append(PlainMention(mentioned["id"], replace_text))
    return tuple(mentions)


_READ_HERE = {"from", "recipient", "conversation", "entities"}
# The schema type of each top-level JSON key (keys the schema does not name are kept aside by
# msrest, never read: any value does).
_TOP = {
    desc["key"]: desc["type"]
    for desc in Activity._attribute_map.values()
    if desc["key"] not in _READ_HERE
}


def read_plain(body: dict[str, Any]) -> PlainActivity | None:
    """What the bridge uses of ``body``, or ``None`` when the SDK must read it (see above)."""
    top = _TOP
    for key, value in body.items():
        kind = top.get(key)
        if kind is not None and not _simple(value, kind):
            return None
    author = _account(body.get("from"))
    recipient = _account(body.get("recipient"))
    if author is _UNREADABLE or recipient is _UNREADABLE:
        return None
    mentions = _mentions(body.get("entities"))
    if mentions is None:
        return None
    text = body.get("text")
    if mentions and text is None:
        return None  # botbuilder's removal would meet None: leave that body to the SDK path
    raw_conversation = body.get("conversation")
    conversation = None
    if raw_conversation is not None:
        conversation = _model(raw_conversation, ConversationAccount._attribute_map)
        if conversation is None:
            return None
    timestamp = body.get("timestamp")
    return PlainActivity(
        type=body.get("type"),
        id=body.get("id"),
        at=_timestamp(timestamp) if timestamp is not None else None,
        service_url=body.get("serviceUrl"),
        channel_id=body.get("channelId"),
        conversation_id=conversation.get("id") if conversation is not None else None,
        tenant_id=conversation.get("tenantID") if conversation is not None else None,
        has_conversation=conversation is not None,
        author=author,
        recipient=recipient,
        text=text,
        mentions=mentions,
    )


def _without_mention(activity: PlainActivity, text: str | None) -> str | None:
    # botbuilder's TurnContext.remove_mention_text, step by step, on the plain reading.
    assert activity.recipient is not None
    for mention in activity.mentions:
        if mention.mentioned_id == activity.recipient.id:
            match = _MENTION.match(escape(mention.replace_text))
            if match:
                text = re.sub(match.groups()[1], "", text)  # type: ignore[arg-type]
                text = re.sub(_EMPTY_MENTION, "", text)
    return text


def _is_bot(activity: PlainActivity) -> bool:
    author, recipient = activity.author, activity.recipient
    if author is None:
        return True
    return (
        author.role == "bot"
        or str(author.id or "").startswith("28:")  # Teams bot ids
        or (recipient is not None and author.id == recipient.id)
    )


def inbound_from_plain(
    activity: PlainActivity, *, profile: str, channel: str, thread: str | None
) -> InboundMessage | None:
    """``inbound_from_activity`` for a plain reading (the same message, field for field)."""
    if activity.type != "message" or activity.id is None:
        return None
    author = activity.author
    text = _without_mention(activity, activity.text) if activity.recipient else activity.text
    return InboundMessage(
        message_id=str(activity.id),
        channel=channel,
        author=str(author.aad_object_id or author.id) if author is not None else "",
        text=(text or "").strip(),
        at=activity.at if activity.at is not None else 0.0,
        thread=thread,
        author_is_bot=_is_bot(activity),
        platform="teams",
        profile=profile,
        extra={
            "author_name": author.name if author is not None else None,
            "tenant_id": activity.tenant_id,
            "service_url": activity.service_url,
        },
    )
