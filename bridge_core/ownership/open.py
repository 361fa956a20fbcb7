"""Opening a conversation log from a path or URL."""

from __future__ import annotations

from pathlib import Path

from bridge_core.ownership.log import DEFAULT_SEEN_TTL, ConversationLog
from bridge_core.ownership.memory_log import MemoryConversationLog, MemoryLogStore

__all__ = ["open_conversation_log"]


async def open_conversation_log(
    target: str | Path,
    *,
    channel: str,
    seen_ttl: float = DEFAULT_SEEN_TTL,
    key_prefix: str = "bridge",
    max_len: int = 1_000_000,
) -> ConversationLog:
    """Open ``channel``'s log: a SQLite path (or ``sqlite:///path``), ``redis://…`` or
    ``memory://`` (a fresh in-process store).

    ``seen_ttl`` is how long admitted message ids are remembered for dedup. For Redis,
    ``key_prefix`` namespaces the keys and ``max_len`` caps the stream (approximately).
    """
    text = str(target)
    if text.startswith(("redis://", "rediss://", "unix://")):
        from bridge_core.ownership.redis_log import RedisConversationLog

        return await RedisConversationLog.connect(
            text, channel=channel, seen_ttl=seen_ttl, key_prefix=key_prefix, max_len=max_len
        )
    if text.startswith("memory://"):
        return MemoryConversationLog(MemoryLogStore(), channel=channel)
    if "://" in text and not text.startswith("sqlite://"):
        raise ValueError(
            f"open_conversation_log: unsupported target {text!r}; use a SQLite file path, "
            "sqlite:///path, redis://host:port/db or memory://"
        )
    from bridge_core.ownership.sqlite_log import SqliteConversationLog

    path = text.removeprefix("sqlite://") if text.startswith("sqlite://") else text
    return await SqliteConversationLog.open(path, channel=channel, seen_ttl=seen_ttl)
