"""Turning a Discord message into an ``InboundMessage``: a gateway ``MESSAGE_CREATE`` as
discord.py parsed it (``inbound_from_message``), or a message object from REST as JSON
(``inbound_from_json``, for what the backfill reads back). Both go through one builder, so the
same message reads the same either way.

Discord threads are channels of their own with a parent; the core's conversation is the parent
channel and the thread, so a message in a thread reads as ``channel=<parent>, thread=<thread>``.
Bots, webhooks, system users and the bridge's own messages are marked ``author_is_bot``; the
provider hands none of them to the core, so they are never user turns.
"""

from __future__ import annotations

from collections.abc import Mapping

import discord

from bridge_core import InboundMessage

__all__ = ["USER_MESSAGE_TYPES", "inbound_from_json", "inbound_from_message", "snowflake"]

USER_MESSAGE_TYPES = frozenset({discord.MessageType.default, discord.MessageType.reply})
_USER_TYPE_VALUES = frozenset(kind.value for kind in USER_MESSAGE_TYPES)
_SNOWFLAKE_MAX = (1 << 64) - 1


def snowflake(value: object) -> int | None:
    """``value`` as a Discord id (a decimal string, as Discord sends ids, or an int), or
    ``None`` when it is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        # isdecimal also takes other scripts' digits, which int() would read as a number
        if not (value.isascii() and value.isdigit()) or len(value) > 20:
            return None
        value = int(value)
    if isinstance(value, int) and 0 < value <= _SNOWFLAKE_MAX:
        return value
    return None


def _build(
    *,
    message_id: int,
    channel_id: str,
    thread: str | None,
    author_id: int,
    author_name: str,
    is_bot: bool,
    text: str,
    guild_id: str | None,
    profile: str,
) -> InboundMessage:
    return InboundMessage(
        message_id=str(message_id),
        channel=channel_id,
        author=str(author_id),
        text=text,
        # discord.py's created_at is the snowflake's time; the same arithmetic for both paths
        at=discord.utils.snowflake_time(message_id).timestamp(),
        thread=thread,
        author_is_bot=is_bot,
        platform="discord",
        profile=profile,
        extra={"author_name": author_name, "guild_id": guild_id},
    )


def inbound_from_message(
    message: discord.Message, *, profile: str, own_user_id: int | None
) -> InboundMessage | None:
    """The core's form of ``message``, or ``None`` for messages that are not chat at all
    (joins, pins, boosts and other system notices)."""
    if message.type not in USER_MESSAGE_TYPES:
        return None
    channel = message.channel
    thread: str | None = None
    channel_id = str(channel.id)
    if isinstance(channel, discord.Thread):
        channel_id, thread = str(channel.parent_id), str(channel.id)
    author = message.author
    guild = message.guild
    return _build(
        message_id=message.id,
        channel_id=channel_id,
        thread=thread,
        author_id=author.id,
        author_name=author.name,
        is_bot=bool(
            author.bot
            or author.system
            or message.webhook_id is not None
            or (own_user_id is not None and author.id == own_user_id)
        ),
        text=message.content,
        guild_id=str(guild.id) if guild is not None else None,
        profile=profile,
    )


def inbound_from_json(
    data: object,
    *,
    parent_id: str | None,
    guild_id: str | None,
    profile: str,
    own_user_id: int | None,
) -> InboundMessage | None:
    """The core's form of a message object read over REST, by the rules of
    ``inbound_from_message``; ``None`` for a system notice and for anything not shaped like a
    message (never an exception: one odd message must not stop the others).

    A REST message names only its own channel (a thread's id for a message in a thread) and no
    guild, so the thread's ``parent_id`` and the ``guild_id`` come from the caller, who saw them
    when the channel's live messages arrived.
    """
    if not isinstance(data, Mapping):
        return None
    kind = data.get("type")
    if not isinstance(kind, int) or isinstance(kind, bool) or kind not in _USER_TYPE_VALUES:
        return None
    message_id = snowflake(data.get("id"))
    channel = snowflake(data.get("channel_id"))
    author = data.get("author")
    text = data.get("content")
    if message_id is None or channel is None or not isinstance(author, Mapping):
        return None
    author_id = snowflake(author.get("id"))
    name = author.get("username")
    if author_id is None or not isinstance(text, str) or not isinstance(name, str):
        return None
    thread: str | None = None
    channel_id = str(channel)
    if parent_id is not None:
        channel_id, thread = parent_id, str(channel)
    return _build(
        message_id=message_id,
        channel_id=channel_id,
        thread=thread,
        author_id=author_id,
        author_name=name,
        is_bot=bool(
            author.get("bot")
            or author.get("system")
            or data.get("webhook_id") is not None
            or (own_user_id is not None and author_id == own_user_id)
        ),
        text=text,
        guild_id=guild_id,
        profile=profile,
    )
