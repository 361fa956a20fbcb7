"""A channel's streamed replies: running them, remembering their partial messages, and landing
each final part, which the delivery ledger hands back, in the message that showed it.

- ``consume(obligation, deltas)`` feeds an agent's deltas to a ``ReplyStream``; each new partial
  message's ref is written to the key-value store beside the ledger (``streams`` namespace,
  keyed by obligation id) before the next delta is taken, so a process killed mid-stream leaves
  the next one (the turn has no frame: ownership answers it again) the refs to mark interrupted.
  The agent failing or the task being cancelled marks the partials interrupted at once.
- ``deliver(delivery)`` is the ledger's delivery function for this channel. A part with a partial
  message posted by this process is the final edit of that message (through the stream's
  native stop when it streamed natively), at the terminal priority, after the message's edit
  spacing; if that message is gone (``NotFound``) the part is posted anew. A part whose poster
  died is posted anew and the stale partial is marked interrupted. Everything else is a post.

ADR 0090 records why.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Protocol

import anyio

from bridge_core.ledger import Delivery, Obligation, Reply, marker_headroom
from bridge_core.provider import (
    ChatProvider,
    KeyValueStore,
    MessageRef,
    NotFound,
    ProviderError,
    StreamingMode,
)
from bridge_core.sending import ChannelSender, Edit, Post, Priority
from bridge_core.streams import INTERRUPTED, PartSplitter, ReplyStream, StreamResult
from bridge_core.text import prepare, valid_text

__all__ = [
    "KV_NAMESPACE",
    "LedgerLike",
    "StreamedReplies",
    "answer_streamed",
    "reply_splitter",
    "split_reply",
]

log = logging.getLogger("bridge_core.runtime.streaming")

KV_NAMESPACE = "bridge.streams"


def split_reply(text: str, provider: ChatProvider) -> tuple[str, ...]:
    """Escape, then chunk at the provider's maximum, leaving room for the recovery marker counted
    in the provider's own unit (a part resent marked must still fit, ADR 0067)."""
    caps = provider.capabilities
    room = max(1, caps.max_length - marker_headroom(caps.length_unit))
    return tuple(prepare(text, escape=provider.escape, max_length=room, unit=caps.length_unit))


def reply_splitter(provider: ChatProvider) -> PartSplitter:
    """``split_reply`` of the text made valid (as the reply path records it, ADR 0070), for one
    growing text: a stream's parts, cut again only past the parts that are settled."""
    caps = provider.capabilities
    return PartSplitter(
        escape=provider.escape,
        max_length=max(1, caps.max_length - marker_headroom(caps.length_unit)),
        unit=caps.length_unit,
        clean=valid_text,
    )


class LedgerLike(Protocol):
    """What the reply path needs of the delivery ledger (``DeliveryLedger``, ``DisabledLedger``)."""

    async def record(self, reply: Reply) -> tuple[Obligation, bool]: ...

    async def deliver_now(self, row: Obligation) -> Obligation: ...

    def channel_proven(self, profile: str, channel: str) -> None: ...


def _encode(refs: Sequence[MessageRef]) -> bytes:
    return json.dumps([[r.channel, r.message_id, r.thread] for r in refs]).encode()


def _decode(data: bytes) -> list[MessageRef]:
    return [
        MessageRef(channel, message_id, thread) for channel, message_id, thread in json.loads(data)
    ]


class StreamedReplies:
    """The streamed replies of one channel (see the module docstring)."""

    def __init__(
        self,
        sender: ChannelSender,
        provider: Callable[[], ChatProvider],
        *,
        splitter: Callable[[ChatProvider], Callable[[str], Sequence[str]]] = reply_splitter,
        kv: KeyValueStore | None = None,
    ) -> None:
        self._sender = sender
        self._provider = provider
        self._splitter = splitter
        self._kv = kv
        self.live: dict[str, ReplyStream] = {}
        self._saved: dict[str, tuple[MessageRef, ...]] = {}  # partial refs last stored

    # ------------------------------------------------------------------ running a stream

    async def consume(
        self, obligation: str, deltas: AsyncIterator[str], *, thread: str | None
    ) -> StreamResult:
        """Show ``deltas`` as they come; the finished text and its partial messages. The stream
        stays in ``live`` (for ``deliver``) until ``close(obligation)``."""
        await self.open(obligation, thread=thread)
        try:
            async for delta in deltas:
                await self.feed(obligation, delta)
        except BaseException:
            self.interrupt(obligation)
            raise
        return await self.finish(obligation)

    async def open(self, obligation: str, *, thread: str | None) -> ReplyStream:
        """Start showing the reply ``obligation`` (after marking a dead process's partials of it
        interrupted); ``feed`` it, then ``finish`` or ``interrupt`` it."""
        await self.retire_stale(obligation)
        stream = ReplyStream(
            self._sender,
            self._provider(),
            key=("stream", obligation),
            split=self._splitter(self._provider()),
            thread=thread,
        )
        self.live[obligation] = stream
        self._saved[obligation] = ()
        return stream

    async def feed(self, obligation: str, delta: str) -> None:
        """Append ``delta``; a new partial message's ref is stored before this returns."""
        stream = self.live[obligation]
        stream.feed(delta)
        if stream.partials != self._saved.get(obligation):
            await self._save(obligation, stream.partials)

    async def finish(self, obligation: str, *, text: str | None = None) -> StreamResult:
        """The reply is complete: its text and the refs of its partial messages. ``text``, when
        given, is the final text instead of the deltas' (a connected agent's ``final``); a
        partial message it has no part for is marked interrupted."""
        result = await self.live[obligation].finish()
        if text is not None and text != result.text:
            parts = len(self.split(text))
            self.mark_interrupted(result.partials[parts:])
            result = StreamResult(text, result.partials[:parts])
        if result.partials != self._saved.get(obligation):
            await self._save(obligation, result.partials)
        return result

    def interrupt(self, obligation: str) -> None:
        """The reply will not be finished here: its partial messages say so (never blocks)."""
        stream = self.live.pop(obligation, None)
        self._saved.pop(obligation, None)
        if stream is not None:
            stream.interrupt()

    async def _save(self, obligation: str, refs: tuple[MessageRef, ...]) -> None:
        self._saved[obligation] = refs
        await self._remember(obligation, refs)

    async def close(self, obligation: str) -> None:
        """The reply is recorded and its delivery settled: forget its stream and its refs."""
        self.live.pop(obligation, None)
        self._saved.pop(obligation, None)
        if self._kv is not None:
            with anyio.CancelScope(shield=True):
                try:
                    await self._kv.delete(KV_NAMESPACE, obligation)
                except Exception as error:
                    log.warning(
                        "streams: forgetting the partials of %s failed: %r", obligation, error
                    )

    async def retire_stale(self, obligation: str) -> None:
        """Partial messages a dead process left for ``obligation``: mark them interrupted."""
        if self._kv is None:
            return
        try:
            data = await self._kv.get(KV_NAMESPACE, obligation)
            stale = _decode(data) if data else []
        except Exception as error:
            # Not fatal to the reply: the worst is a dead process's partial left unmarked.
            log.warning("streams: reading the partials of %s failed: %r", obligation, error)
            return
        if stale:
            log.info(
                "streams: %s: marking %d stale partial message(s) interrupted",
                obligation,
                len(stale),
            )
            self.mark_interrupted(stale)

    def split(self, text: str) -> Sequence[str]:
        """The parts of a whole reply's ``text``, as its stream cut them."""
        return self._splitter(self._provider())(text)

    def mark_interrupted(self, refs: Sequence[MessageRef]) -> None:
        """Edit each of ``refs`` to say its answer was interrupted (terminal, paced).

        With native streaming a partial in a thread may still be streaming (its poster died):
        it is stopped with the notice appended, and only if it is no longer streaming
        (``NotFound``) is its text replaced; one request per paced write either way."""
        provider = self._provider()
        if not provider.capabilities.edit:
            return
        native = provider.capabilities.streaming_mode is StreamingMode.NATIVE
        for ref in refs:
            if native and ref.thread is not None:
                self._stop_interrupted(provider, ref)
            else:
                self._replace_interrupted(ref)

    def _replace_interrupted(self, ref: MessageRef) -> None:
        self._sender.submit(
            ("interrupted", ref.message_id),
            text=lambda: INTERRUPTED,
            edit=ref,
            priority=Priority.TERMINAL,
        )

    def _stop_interrupted(self, provider: ChatProvider, ref: MessageRef) -> None:
        async def stop(target: MessageRef, text: str) -> MessageRef:
            return await provider.stream_stop(target, f"\n\n{text}")

        def stopped(outcome: MessageRef | ProviderError | None) -> None:
            if isinstance(outcome, NotFound):  # not streaming any more: replace its text
                self._replace_interrupted(ref)

        self._sender.submit(
            ("interrupted", ref.message_id),
            text=lambda: INTERRUPTED,
            edit=ref,
            priority=Priority.TERMINAL,
            on_outcome=stopped,
            call=stop,
        )

    async def _remember(self, obligation: str, refs: tuple[MessageRef, ...]) -> None:
        if self._kv is None:
            return
        try:
            await self._kv.put(KV_NAMESPACE, obligation, _encode(refs))
        except Exception as error:  # the stream goes on; only the crash clean-up is weaker
            log.warning("streams: remembering the partials of %s failed: %r", obligation, error)

    # ------------------------------------------------------------------ the ledger's delivery

    async def deliver(self, delivery: Delivery) -> MessageRef:
        """Send one part of a reply for the ledger (see the module docstring)."""
        post = Post(delivery.text, thread=delivery.thread, begin=delivery.begin, key=delivery.key)
        partial = delivery.partial
        if partial is None or not self._provider().capabilities.edit:
            return await self._sender.send(post, priority=Priority.TERMINAL)
        if not delivery.poster_alive:
            ref = await self._sender.send(post, priority=Priority.TERMINAL)
            self.mark_interrupted([partial])
            return ref
        stream = self.live.get(delivery.obligation_id)
        writes = stream.final_writes(delivery.part, delivery.text) if stream is not None else []
        ops = [Edit(w.ref, w.text, call=w.call) for w in writes] or [Edit(partial, delivery.text)]
        try:
            ref = partial
            for n, op in enumerate(ops):
                if n == 0:
                    op = Edit(op.ref, op.text, begin=delivery.begin, call=op.call)
                ref = await self._sender.send(op, priority=Priority.TERMINAL)
            return ref
        except NotFound:
            log.info(
                "streams: %s part %d: its message is gone; posting it",
                delivery.obligation_id,
                delivery.part,
            )
            return await self._sender.send(post, priority=Priority.TERMINAL)


async def answer_streamed(
    replies: StreamedReplies,
    ledger: LedgerLike,
    reply: Reply,
    deltas: AsyncIterator[str],
) -> Obligation:
    """Stream ``deltas`` as ``reply`` (its ``text`` and ``chunks`` are replaced by the streamed
    text's), record it with its partials, deliver it; the row as it ended. When ``reply`` was
    recorded before, the row is that one and this stream's messages are marked interrupted.
    The reply path of a gateway without an agent group (``chatbridge simulate``, tests); the
    gateway's own path records the turn's frame between the row and the delivery
    (``ChannelRuntime``)."""
    obligation = reply.obligation_id
    try:
        result = await replies.consume(obligation, deltas, thread=reply.thread)
        final = dataclasses.replace(
            reply,
            text=result.text,
            chunks=tuple(replies.split(result.text)),
            partials=result.partials,
        )
        row, created = await ledger.record(final)
        if not created:
            # Recorded before (the same reply answered again): that row, with its own text and
            # partials, is the answer, and this stream's messages are left over, as in
            # ChannelRuntime.record_reply. Delivering the row is still right: the claim takes
            # only this process's or a dead owner's row, and a delivered one not at all.
            replies.mark_interrupted(result.partials)
        return await ledger.deliver_now(row)
    finally:
        await replies.close(obligation)
