"""One streamed reply: the latest text wins, one message edited in place, paced by the sender.

``feed(delta)`` is synchronous and allocates nothing per delta beyond appending the text: the
stream owes the sender at most one operation at a time (seed ADR 0007's rule, applied to a
reply), and the text of that operation is rendered when the sender takes it, so any number of
deltas before the next slot cost one write. Pending work is bounded by replies in progress,
never by deltas.

- The first delta submits the reply's first message at once (``NEW``: no hold), so the first
  text is visible within one send slot of it.
- Later text goes out as edits of that message (``UPDATE``), which the sender spaces by the
  channel's ``edit_spacing``; each edit shows the latest text and a cursor (``CURSOR``), so a
  partial message never looks finished.
- When the text outgrows the platform's maximum (``split`` returns more parts than there are
  messages), the stream rolls over: the full part is written, then the next part is posted.
- ``finish()`` stops the intermediate work, waits for a write in flight, and returns the final
  text with the partial messages' refs. The caller makes the final text a ledger obligation;
  ``final_ops`` gives the writes that land it as the last edit of each partial message.
- ``interrupt()`` stops it and edits every partial message to say the answer was interrupted.

Modes (``StreamingMode``): ``EDIT`` as above; ``NATIVE`` the same pacing through the
provider's ``stream_start`` / ``stream_append`` (deltas of the acknowledged text) and, at the
end, ``stream_stop``; ``NONE`` sends nothing until the final post.

Errors (the seed's table for live messages): the sender pauses on ``RateLimited`` and re-renders
the latest text after; ``NotFound`` on an edit drops the message's ref and the next update posts
one new message; ``Forbidden`` work is held by the sender until its re-check; a refused rendering
(``MessageRejected``), a post answered ``NotFound`` (no channel or thread to post in) or a
channel given up stops the intermediate writes (the final still goes through the ledger).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import asdict, dataclass

import anyio

from bridge_core.provider import (
    ChatProvider,
    MessageRef,
    NotFound,
    ProviderError,
    StreamingMode,
)
from bridge_core.streams.protocol import NEW, TERMINAL, UPDATE, StreamSender

__all__ = [
    "CURSOR",
    "INTERRUPTED",
    "FinalWrite",
    "ReplyStream",
    "StreamResult",
    "StreamStatistics",
]

RUN = 256
"""Deltas joined into one string at a time (the stream's memory is its text plus one object per
``RUN`` deltas)."""

CURSOR = " ▍"
"""Shown after the text of a message that is still being written."""

INTERRUPTED = "⚠️ This answer was interrupted before it was finished; it is sent again in full."
"""What a partial message says once its stream died (the full answer follows in a new message)."""


@dataclass(frozen=True, slots=True)
class StreamResult:
    """What a finished stream leaves: the whole text and the messages that show parts of it."""

    text: str
    partials: tuple[MessageRef, ...]


@dataclass(frozen=True, slots=True)
class FinalWrite:
    """One write that lands a part's final text: an edit of ``ref`` with ``text``, through
    ``call`` when given (a native stream's stop) instead of ``provider.edit``."""

    ref: MessageRef
    text: str
    call: Callable[[MessageRef, str], Awaitable[MessageRef]] | None = None


@dataclass(slots=True)
class _StreamCounts:
    deltas: int = 0
    submitted: int = 0
    written: int = 0
    not_found: int = 0


@dataclass(frozen=True, slots=True)
class StreamStatistics:
    """``ReplyStream.statistics()``: deltas taken, edits submitted and written."""

    deltas: int
    submitted: int
    written: int
    not_found: int


class ReplyStream:
    """See the module docstring. ``split(text)`` cuts the escaped text into the platform's
    parts (the runtime's ``split_reply``); the final reply must be cut by the same function."""

    def __init__(
        self,
        sender: StreamSender,
        provider: ChatProvider,
        *,
        key: Hashable,
        split: Callable[[str], Sequence[str]],
        thread: str | None = None,
        mode: StreamingMode | None = None,
        cursor: str = CURSOR,
    ) -> None:
        self._sender = sender
        self._provider = provider
        self._key = key
        self._split = split
        self._thread = thread
        self.mode = mode if mode is not None else provider.capabilities.streaming_mode
        if self.mode is StreamingMode.NATIVE and thread is None:
            # platforms' own streams live in threads (Slack's chat.startStream needs one): a
            # reply outside a thread streams by editing its message
            self.mode = StreamingMode.EDIT
        self._cursor = cursor
        # the text as a two-level rope: deltas, joined into a run every RUN deltas, so appending
        # is O(1), reading is one join, and memory is the text plus one small object per run
        self._runs: list[str] = []
        self._deltas: list[str] = []
        self._version = 0
        self._parts_cache: tuple[int, Sequence[str]] = (-1, ())
        self._refs: list[MessageRef | None] = []
        self._written: list[str] = []  # per part: the text it shows (native: acknowledged)
        self._pending: tuple[int, str] | None = None  # the write in flight: (part, text)
        self._owed = False
        self._closed = False
        self._stopped = False  # the channel refused the stream: no more intermediate writes
        self._interrupted = False
        self._settled = anyio.Event()
        self._counts = _StreamCounts()

    # ------------------------------------------------------------------ the agent's side

    def statistics(self) -> StreamStatistics:
        """Its counters, as one snapshot."""
        return StreamStatistics(**asdict(self._counts))

    def feed(self, delta: str) -> None:
        """Append ``delta`` to the reply (synchronous; the write goes out at the next slot)."""
        if self._closed:
            raise RuntimeError("ReplyStream.feed() after finish() or interrupt()")
        if not delta:
            return
        deltas = self._deltas
        deltas.append(delta)
        if len(deltas) >= RUN:
            self._runs.append("".join(deltas))
            deltas.clear()
        self._version += 1
        self._counts.deltas += 1
        if not self._owed and not self._stopped and self.mode is not StreamingMode.NONE:
            self._submit()

    @property
    def text(self) -> str:
        """The text so far."""
        if self._deltas:
            self._runs.append("".join(self._deltas))
            self._deltas.clear()
        if len(self._runs) > 1:
            self._runs[:] = ["".join(self._runs)]
        return self._runs[0] if self._runs else ""

    @property
    def partials(self) -> tuple[MessageRef, ...]:
        """The messages showing the reply so far, part by part (up to the first gap)."""
        refs: list[MessageRef] = []
        for ref in self._refs:
            if ref is None:
                break
            refs.append(ref)
        return tuple(refs)

    @property
    def owed(self) -> bool:
        """A write of this stream is queued or in flight at the sender."""
        return self._owed

    async def finish(self) -> StreamResult:
        """Stop intermediate writes, wait for one in flight, return the text and the partials.

        Partial messages after a gap (a deleted message whose part was never posted again) are
        marked interrupted and left out, so the refs returned are those of parts 0..n-1.
        """
        self._close()
        if self._owed:
            await self._settled.wait()
        partials = self.partials
        orphans = [ref for ref in self._refs[len(partials) :] if ref is not None]
        self._mark_interrupted(orphans)
        return StreamResult(self.text, partials)

    def interrupt(self) -> None:
        """The reply will not be finished here: stop, and edit every partial message to say so
        (a post in flight is marked when it lands). Never blocks."""
        self._interrupted = True
        self._close()
        self._mark_interrupted([ref for ref in self._refs if ref is not None])

    def final_writes(self, part: int, text: str) -> list[FinalWrite]:
        """The writes that land ``text`` as part ``part``'s final state in its partial message
        (empty when that part has none: post it)."""
        if part >= len(self._refs) or self._refs[part] is None:
            return []
        ref = self._refs[part]
        assert ref is not None
        if self.mode is not StreamingMode.NATIVE:
            return [FinalWrite(ref, text)]
        acknowledged = self._written[part]
        if text.startswith(acknowledged):
            return [FinalWrite(ref, text[len(acknowledged) :], self._provider.stream_stop)]
        # the text shown is not a prefix of the final one (a resend's marker, an escape that
        # changed with later text): end the stream, then replace its text
        return [FinalWrite(ref, "", self._provider.stream_stop), FinalWrite(ref, text)]

    # ------------------------------------------------------------------ internals

    def _close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._owed:
            # queued work is answered None at once (``_on_outcome``); work in flight settles
            # when its outcome arrives
            self._sender.cancel(self._key)
        if not self._owed:
            self._settled.set()

    def _parts(self) -> Sequence[str]:
        version, parts = self._parts_cache
        if version != self._version:
            parts = self._split(self.text)
            self._parts_cache = (self._version, parts)
        return parts

    def _shown(self, parts: Sequence[str], part: int) -> str:
        """What part ``part``'s message shows once it is up to date (before the final)."""
        return parts[part] if self.mode is StreamingMode.NATIVE else parts[part] + self._cursor

    def _next(self) -> int | None:
        """The part the next write is for, or ``None`` when every message is up to date: the
        first part without a message or behind its text, else a new part to roll over to."""
        parts = self._parts()
        native = self.mode is StreamingMode.NATIVE
        for part, ref in enumerate(self._refs):
            if part >= len(parts):
                break
            if ref is None:
                return part
            if self._written[part] != self._shown(parts, part):
                if native and not parts[part].startswith(self._written[part]):
                    continue  # appends cannot shorten it: the final's stop and replace will
                return part
        if len(parts) > len(self._refs):
            return len(self._refs)
        return None

    def _submit(self) -> None:
        part = self._next()
        if part is None:
            return
        ref = self._refs[part] if part < len(self._refs) else None
        native = self.mode is StreamingMode.NATIVE
        self._owed = True
        self._counts.submitted += 1
        if ref is None:
            self._sender.submit(
                self._key,
                text=lambda: self._render(part, posting=True),
                priority=NEW,
                on_outcome=lambda outcome: self._on_outcome(part, outcome, posted=True),
                thread=self._thread,
                call=self._native_start if native else None,
            )
        else:
            self._sender.submit(
                self._key,
                text=lambda: self._render(part, posting=False),
                edit=ref,
                priority=UPDATE,
                on_outcome=lambda outcome: self._on_outcome(part, outcome, posted=False),
                call=self._provider.stream_append if native else None,
            )

    async def _native_start(self, channel: str, text: str, thread: str | None) -> MessageRef:
        return await self._provider.stream_start(channel, text, thread=thread)

    def _render(self, part: int, *, posting: bool) -> str | None:
        """The text to write now (``None``: nothing new to show), rendered at send time."""
        if self._closed:
            return None
        parts = self._parts()
        if part >= len(parts):
            return None
        if self.mode is StreamingMode.NATIVE:
            body = parts[part]
            shown = "" if posting else self._written[part]
            if not body.startswith(shown) or len(body) == len(shown):
                return None  # an escape changed with later text: the final edit corrects it
            self._pending = (part, body)
            return body[len(shown) :]
        text = self._shown(parts, part)
        if not posting and text == self._written[part]:
            return None
        self._pending = (part, text)
        return text

    def _on_outcome(
        self, part: int, outcome: MessageRef | ProviderError | None, *, posted: bool
    ) -> None:
        pending, self._pending = self._pending, None
        self._owed = False
        if isinstance(outcome, MessageRef):
            self._counts.written += 1
            if posted:
                while len(self._refs) <= part:
                    self._refs.append(None)
                    self._written.append("")
                self._refs[part] = outcome
            if pending is not None:
                self._written[part] = pending[1]
            if self._interrupted:
                self._mark_interrupted([outcome])
        elif isinstance(outcome, NotFound) and not posted:
            # the message was deleted: drop its ref, the next update posts one new message
            self._counts.not_found += 1
            if part < len(self._refs):
                self._refs[part] = None
                self._written[part] = ""
        elif isinstance(outcome, NotFound):
            # a post has no message to lose: its channel or thread is gone, a refusal (each
            # update posted again, for ever, ADR 0184); the final still goes through the ledger
            self._counts.not_found += 1
            self._stopped = True
        elif isinstance(outcome, ProviderError):
            self._stopped = True  # refused or given up: only the final (the ledger's) goes on
        if self._closed:
            self._settled.set()
            return
        # nothing was sent (outcome None): wait for the next delta rather than spin
        if outcome is not None and not self._stopped:
            self._submit()

    def _mark_interrupted(self, refs: Sequence[MessageRef]) -> None:
        for ref in refs:
            self._sender.submit(
                ("interrupted", self._key, ref.message_id),
                text=lambda: INTERRUPTED,
                edit=ref,
                priority=TERMINAL,
                call=self._native_interrupt if self.mode is StreamingMode.NATIVE else None,
            )

    async def _native_interrupt(self, ref: MessageRef, text: str) -> MessageRef:
        # one call: the notice is appended below the text streamed so far, and the stream ends
        return await self._provider.stream_stop(ref, f"\n\n{text}")
