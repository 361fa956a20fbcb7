"""Dropping inbound messages a platform delivers more than once.

Slack retries an event it thinks was not acknowledged (the last retry about 5 minutes after the
first), Discord delivers a message to every connection of a bot, a webhook retry may reach
another host. ``InboundDedup`` remembers each message id for ``window`` seconds (default 10
minutes), at most ``max_size`` ids (the oldest forgotten first), on an injectable monotonic
clock. When the reconnect watcher rebuilds a provider, the new instance's dedup ``adopt``s the
old one's live ids at their original seen times, so a replay across the reconnect is still
dropped and the window does not stretch.

This is the in-process layer. The durable layer (ids that survive a restart, checked in the
same transaction that appends the turn) is the conversation log's admission
(``bridge_core.ownership``).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import TypeVar

from bridge_core.provider import InboundMessage, InboundSink

__all__ = [
    "DEFAULT_DEDUP_SIZE",
    "DEFAULT_DEDUP_WINDOW",
    "InboundDedup",
    "deduplicated",
    "filter_into",
]

T = TypeVar("T")

DEFAULT_DEDUP_WINDOW = 600.0
DEFAULT_DEDUP_SIZE = 100_000


class InboundDedup:
    """Message ids seen within the last ``window`` seconds (at most ``max_size`` of them)."""

    def __init__(
        self,
        *,
        window: float = DEFAULT_DEDUP_WINDOW,
        max_size: int = DEFAULT_DEDUP_SIZE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if window <= 0 or max_size < 1:
            raise ValueError(
                f"InboundDedup needs window > 0 and max_size >= 1, got {window=}, {max_size=}"
            )
        self.window = window
        self.max_size = max_size
        self.clock = clock
        self.dropped = 0
        # insertion order is seen order, and seen times never decrease (monotonic clock)
        self._seen: OrderedDict[str, float] = OrderedDict()

    def __len__(self) -> int:
        self._expire(self.clock())
        return len(self._seen)

    def __contains__(self, message_id: object) -> bool:
        now = self.clock()
        self._expire(now)
        return message_id in self._seen

    def _expire(self, now: float) -> None:
        seen = self._seen
        while seen:
            oldest, at = next(iter(seen.items()))
            if now - at < self.window:
                break
            del seen[oldest]

    def mark_seen(self, message_id: str) -> bool:
        """Record ``message_id`` as seen now, unless it was seen within the window already;
        True in that case (a replay, counted in ``dropped``), False for a new id."""
        now = self.clock()
        self._expire(now)
        if message_id in self._seen:
            self.dropped += 1
            return True
        self._seen[message_id] = now
        while len(self._seen) > self.max_size:
            self._seen.popitem(last=False)
        return False

    def forget(self, message_id: str) -> None:
        """Drop ``message_id`` (its handling failed: the platform's retry must get through)."""
        self._seen.pop(message_id, None)

    def live(self) -> list[tuple[str, float]]:
        """The live ids and their seen times, oldest first."""
        self._expire(self.clock())
        return list(self._seen.items())

    def adopt(self, previous: InboundDedup) -> None:
        """Take ``previous``'s live ids at their original seen times (the window does not
        stretch). Both must use the same clock."""
        merged = sorted([*previous.live(), *self._seen.items()], key=lambda item: item[1])
        self._seen = OrderedDict()
        for message_id, at in merged:
            if message_id not in self._seen:
                self._seen[message_id] = at
        while len(self._seen) > self.max_size:
            self._seen.popitem(last=False)


async def filter_into(
    sink: Callable[[InboundMessage], Awaitable[T]], message: InboundMessage, *, dedup: InboundDedup
) -> T | None:
    """``sink(message)``, unless a bot wrote ``message`` or ``dedup`` saw its id within its
    window (then ``None``): the one filter every inbound message passes, whichever way it came.

    If ``sink`` fails, the id is forgotten again, so the platform's retry is not dropped.
    """
    if message.author_is_bot:
        return None
    if dedup.mark_seen(message.message_id):
        return None
    try:
        return await sink(message)
    except BaseException:
        dedup.forget(message.message_id)
        raise


def deduplicated(sink: InboundSink, dedup: InboundDedup) -> InboundSink:
    """A sink that drops messages seen within ``dedup``'s window and messages bots wrote
    (``filter_into`` in front of ``sink``)."""

    async def filtered(message: InboundMessage) -> None:
        await filter_into(sink, message, dedup=dedup)

    return filtered
