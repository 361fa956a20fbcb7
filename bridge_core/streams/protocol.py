"""What a reply stream needs from a channel's sender, as a Protocol (``streams`` never imports
``sending``). ``bridge_core.sending.ChannelSender`` satisfies it; the priority numbers are its
``Priority`` classes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable
from typing import Protocol

from bridge_core.provider import MessageRef, ProviderError

__all__ = ["NEW", "TERMINAL", "UPDATE", "OutcomeCallback", "StreamSender", "TextCallback"]

TERMINAL = 0
"""Terminal updates: the interrupted notice of a partial message."""
NEW = 1
"""A streamed reply's first message (and each message it rolls over to)."""
UPDATE = 2
"""Intermediate edits of a streamed reply."""

TextCallback = Callable[[], str | None]
OutcomeCallback = Callable[[MessageRef | ProviderError | None], None]


class StreamSender(Protocol):
    """A per-channel sender that takes supersedable work without blocking."""

    def submit(
        self,
        key: Hashable,
        *,
        text: TextCallback,
        edit: MessageRef | None = None,
        priority: int = UPDATE,
        on_outcome: OutcomeCallback | None = None,
        thread: str | None = None,
        call: Callable[..., Awaitable[MessageRef]] | None = None,
    ) -> bool:
        """Queue work; queued work of ``key`` is replaced in place. ``text`` is rendered at send
        time (``None``: nothing to send); ``call`` stands in for the provider's post or edit."""
        ...

    def cancel(self, key: Hashable) -> bool:
        """Withdraw queued work of ``key`` (its outcome is ``None``)."""
        ...
