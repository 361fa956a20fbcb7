"""Turning a gateway ``MESSAGE_CREATE`` (as discord.py parsed it) into an ``InboundMessage``.

Discord threads are channels of their own with a parent; the core's conversation is the parent
channel and the thread, so a message in a thread reads as ``channel=<parent>, thread=<thread>``.
Bots, webhooks, system users and the bridge's own messages are marked ``author_is_bot``; the
provider hands none of them to the core, so they are never user turns.
"""

from __future__ import annotations

import discord

from bridge_core import InboundMessage

__all__ = ["USER_MESSAGE_TYPES", "inbound_from_message"]

USER_MESSAGE_TYPES = frozenset({discord.MessageType.default, discord.MessageType.reply})


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
    is_bot = (
        author.bot
        or author.system
        or message.webhook_id is not None
        or (own_user_id is not None and author.id == own_user_id)
    )
    guild = message.guild
    return InboundMessage(
        message_id=str(message.id),
        channel=channel_id,
        author=str(author.id),
        text=message.content,
        at=message.created_at.timestamp(),
        thread=thread,
        author_is_bot=is_bot,
        platform="discord",
        profile=profile,
        extra={
            "author_name": author.name,
            "guild_id": str(guild.id) if guild is not None else None,
        },
    )
