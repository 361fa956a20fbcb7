"""What a sender sends: a post or an edit, with text that may be rendered at send time.

``text`` is a string or a callable returning one (or ``None`` for "nothing to send any more").
A callable is called only when the operation leaves the queue, so work that waited through a
pause or a busy budget goes out with the state of that moment, never a stale one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from bridge_core.provider import MessageRef, Priority

__all__ = [
    "Edit",
    "EditCall",
    "Post",
    "PostCall",
    "Priority",
    "SendOp",
    "TextSource",
    "render_text",
]

TextSource = str | Callable[[], str | None]


PostCall = Callable[[str, str, str | None], Awaitable[MessageRef]]
"""``call(channel, text, thread)``: a platform call standing in for ``provider.post``."""
EditCall = Callable[[MessageRef, str], Awaitable[MessageRef]]
"""``call(ref, text)``: a platform call standing in for ``provider.edit``."""


@dataclass(frozen=True, slots=True)
class Post:
    """A new message. ``begin``, when given, is awaited when this post reaches the head of the
    channel's queue and the budget says its send may go (``SendGate.peek``), just before the
    send is reserved (so a post still waiting for its slot has not begun), and again on each
    later try (a grant another gateway took meanwhile, a rate-limit retry), so it must be
    idempotent: the delivery ledger claims its reply there (ADR 0028). If it raises, nothing is
    sent and ``send()`` raises that error.

    ``key``, when given, is the post's idempotency key: the provider reads it as
    ``bridge_core.provider.post_key()`` while it posts (ADR 0080).

    ``call``, when given, is made instead of ``provider.post`` (a native stream's start), paced
    and read exactly as a post."""

    text: TextSource
    thread: str | None = None
    begin: Callable[[], Awaitable[None]] | None = field(default=None, compare=False)
    key: str | None = None
    call: PostCall | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Edit:
    """A new text for a message this channel posted. ``begin`` is as for ``Post`` (the ledger's
    final edit of a streamed reply claims there); ``call`` is made instead of ``provider.edit``
    (a native stream's append or stop), paced and spaced exactly as an edit."""

    ref: MessageRef
    text: TextSource
    begin: Callable[[], Awaitable[None]] | None = field(default=None, compare=False)
    call: EditCall | None = field(default=None, compare=False)


SendOp = Post | Edit


def render_text(text: TextSource) -> str | None:
    return text() if callable(text) else text
