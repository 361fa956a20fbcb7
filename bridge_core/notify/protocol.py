"""What the notifier needs from a sender, as a Protocol (``notify`` never imports ``sending``).

``bridge_core.sending.ChannelSender`` satisfies it; both take their priority classes from the
vocabulary's ``Priority``.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Protocol

from bridge_core.provider import MessageRef, Priority, ProviderError

__all__ = ["OutcomeCallback", "SenderLike", "TextCallback"]

TextCallback = Callable[[], str | None]
OutcomeCallback = Callable[[MessageRef | ProviderError | None], None]


class SenderLike(Protocol):
    """A per-channel sender that takes supersedable work without blocking."""

    def submit(
        self,
        key: Hashable,
        *,
        text: TextCallback,
        edit: MessageRef | None = None,
        priority: Priority = Priority.UPDATE,
        on_outcome: OutcomeCallback | None = None,
        thread: str | None = None,
    ) -> bool:
        """Queue work; queued work of the same key is replaced in place (then True is returned
        and only the replacement's ``on_outcome`` is called). ``text`` is rendered at send time;
        ``on_outcome`` gets the ``MessageRef``, the error, or ``None`` when nothing was sent."""
        ...
