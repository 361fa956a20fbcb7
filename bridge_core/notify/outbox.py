"""The notifier's traffic with its channel's sender: submitting a message's work, reading back
each outcome (ADRs 0012, 0013, 0017).

Each ``Slot`` has its own key, so newer work for a message replaces its queued work in place and
the sender holds at most one operation per message. An outcome is applied to the slot:

- a ``MessageRef``: the rendered version is delivered, and edits go to that ref;
- ``NotFound`` for an edit: the message was deleted; the ref is dropped and the next update posts
  a new one. ``NotFound`` for a post (no channel or thread to post in) reads as a refusal;
- ``MessageRejected``: the platform refused that rendering; it is logged and never resent, and
  the message keeps its ref (a refused post leaves none);
- any other error (``Unreachable``, a stopped sender): the channel is finished, and nothing more
  is submitted.

A rendering that raises (ADR 0026) is contained here, where the message is known: it is logged
with the channel and the message (``agent:NAME`` or ``summary:WORKSPACE``), that version counts as
refused (so it is not rendered again until the next update), and the sender is told there is
nothing to send. Neither the sender nor the notifier stops.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from bridge_core.notify.live import Slot
from bridge_core.notify.protocol import SenderLike
from bridge_core.provider import (
    MessageRef,
    NotifierAction,
    ProviderError,
    TransportError,
    reading_for,
)

__all__ = ["Outbox"]

logger = logging.getLogger("bridge_core.notify")


class Outbox:
    """Submits one notifier's messages to its channel's sender and applies the outcomes."""

    def __init__(self, channel: str, sender: SenderLike, *, thread: str | None) -> None:
        self.channel = channel
        self.dropped_refs = 0
        self.rejected = 0
        self._sender = sender
        self._thread = thread
        self._serial = 0
        self._closed = False

    def new_slot(self, kind: str, name: str) -> Slot:
        """A slot with a key of its own (``kind`` and ``name`` make it readable in the queue)."""
        return Slot(key=self.new_key(kind, name))

    def new_key(self, kind: str, name: str) -> tuple[int, str, int]:
        """A key of its own for a slot (an agent is its own slot)."""
        # Keys are unique per notifier (one outbox each) too: two notifiers may share one sender
        # (a restart in one process), and must never replace each other's work.
        self._serial += 1
        return (id(self), kind + ":" + name, self._serial)

    def submit(self, slot: Slot, edit: MessageRef | None) -> None:
        """Queue the slot's work at its priority: an edit of ``edit``, or a post."""
        if self._closed:
            return
        # Every piece of a slot's work at the sender is of one kind: a ref only comes back with an
        # outcome, so a post and an edit of one slot are never owed at once.
        slot.posting = edit is None
        render = slot.post_text if edit is None else slot.edit_text
        replaced = self._sender.submit(
            slot.key,
            text=lambda: self._render(slot, render),
            edit=edit,
            priority=slot.priority,
            on_outcome=slot.outcome,
            thread=self._thread,
        )
        if not replaced:
            slot.outstanding += 1

    def _render(self, slot: Slot, render: Callable[[], str | None]) -> str | None:
        try:
            return render()
        except Exception as error:
            # That version cannot be shown: like a refusal, it is not resent, and the next
            # update renders again. (Cancellation and the process stopping are BaseExceptions
            # and pass; the sender contains any other BaseException.)
            self.rejected += 1
            slot.refused = slot.version
            logger.error(
                "notifier for %r: rendering the message for %r raised %s: %s; that version is "
                "dropped, the channel carries on",
                self.channel,
                slot.key[1],
                type(error).__name__,
                error,
                exc_info=error,
            )
            return None

    def settle(self, slot: Slot, result: MessageRef | ProviderError | None, what: str) -> bool:
        """Apply one send's outcome to ``slot``; False when the channel is finished.

        ``what`` names the message in the log (``agent 'a1'``, ``the summary of workspace 'w'``).
        """
        slot.outstanding -= 1
        if isinstance(result, MessageRef):
            slot.ref = result
            slot.delivered = slot.rendered
            return True
        if result is None:  # nothing was sent (superseded, or nothing to say)
            return True
        # The error table is the one reading: the sender already paused, backed off or held the
        # work for the other actions, so keyed work only comes back with these three.
        action = reading_for(result).notifier
        if action is NotifierAction.DROP_REF_REPOST and slot.posting:
            # No message was lost: the channel or thread is not there (Discord's bare 404, a
            # Matrix thread with an unknown root). Posting again would meet the same answer, so
            # the rendering is dropped like a refused one (ADR 0017), not reposted for ever.
            self._refused(slot, what, result)
            return True
        if action is NotifierAction.DROP_REF_REPOST:
            self.dropped_refs += 1
            slot.ref = None
            slot.lost = True
            return True
        if action is NotifierAction.DROP_RENDERING:
            self._refused(slot, what, result)
            return True
        # GIVE_UP_CHANNEL, or the sender stopping (SenderClosed, a TransportError): finished.
        self._gave_up(result)
        return False

    def _refused(self, slot: Slot, what: str, error: ProviderError) -> None:
        # Logged when a run of refusals starts; a rendering refused on every update (one attempt
        # per update, paced by the sender) repeats only at debug level until a delivery.
        self.rejected += 1
        level = logging.DEBUG if slot.refused > slot.delivered else logging.WARNING
        slot.refused = slot.rendered
        logger.log(
            level,
            "notifier for %r: the platform refused the message for %s (%s); that rendering is "
            "dropped, the channel carries on",
            self.channel,
            what,
            error,
        )

    def _gave_up(self, error: ProviderError) -> None:
        # Only Unreachable and a stopped sender (a TransportError) come back as errors for keyed
        # work: the channel is finished, so stop submitting rather than spin.
        if not self._closed:
            level = logging.DEBUG if isinstance(error, TransportError) else logging.WARNING
            logger.log(level, "notifier for %r stops: %s", self.channel, error)
        self._closed = True
