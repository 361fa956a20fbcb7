"""Streamed replies in ``chatbridge simulate``: reply lines, the streams they drive, the sends
each reply cost.

A reply line carries one delta of a streamed reply, or its end::

    {"t": 0.0, "reply": "r1", "delta": "The answer "}
    {"t": 0.4, "reply": "r1", "delta": "is 42."}
    {"t": 0.5, "reply": "r1", "end": true}

Each reply runs the gateway's own path for streamed replies (``StreamedReplies`` and
``answer_streamed``): shown as it is written through the channel's sender, its final text
recorded in a delivery ledger (in memory) and delivered as the last edit of its messages. A reply
with no ``end`` line is ended at the end of the log.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import anyio
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectSendStream

from bridge_core.ledger import DeliveryLedger, MemoryLedgerStore, Obligation, Reply
from bridge_core.provider import ChatProvider
from bridge_core.runtime.streaming import StreamedReplies, answer_streamed
from bridge_core.sending import ChannelSender
from bridge_core.testing.budget import TranscriptEntry

__all__ = ["ReplyLine", "ReplySends", "SimulatedReplies", "reply_line"]

WALL = 1_800_000_000.0  # stored timestamps: a fixed epoch plus virtual time


@dataclass(frozen=True, slots=True)
class ReplyLine:
    reply: str
    delta: str
    end: bool


def reply_line(data: dict[str, Any]) -> ReplyLine:
    """A reply line of the log (``t`` already read); ``ValueError`` names what is wrong."""
    extra = set(data) - {"t", "reply", "delta", "end"}
    if extra:
        raise ValueError(f"unexpected field(s) {', '.join(sorted(extra))} on a reply line")
    reply, delta, end = data["reply"], data.get("delta", ""), data.get("end", False)
    if not isinstance(reply, str) or not reply:
        raise ValueError(f'"reply" must be a non-empty string naming the reply, got {reply!r}')
    if not isinstance(delta, str):
        raise ValueError(f'"delta" must be a string, got {type(delta).__name__}')
    if not isinstance(end, bool):
        raise ValueError(f'"end" must be true or false, got {end!r}')
    if not delta and not end:
        raise ValueError('a reply line needs a "delta" or "end": true')
    return ReplyLine(reply, delta, end)


@dataclass(frozen=True, slots=True)
class ReplySends:
    """What one streamed reply cost the channel, read from the transcript."""

    posts: int
    edits: int
    first_text_after: float | None  # seconds from its first delta to its first visible text
    final_after: float | None  # seconds from its end to its final text
    delivered: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "posts": self.posts,
            "edits": self.edits,
            "first_text_after": self.first_text_after,
            "final_after": self.final_after,
            "delivered": self.delivered,
        }


class SimulatedReplies:
    """The streamed replies of one simulated channel."""

    def __init__(self, sender: ChannelSender, provider: ChatProvider, group: TaskGroup) -> None:
        self._replies = StreamedReplies(sender, lambda: provider)
        self._store = MemoryLedgerStore()
        self._ledger = DeliveryLedger(
            self._store,
            deliver=self._replies.deliver,
            profiles={"simulate"},
            clock=lambda: WALL + anyio.current_time(),
            deliver_begins=True,
        )
        self._group = group
        self._channel = sender.channel
        self._feeds: dict[str, MemoryObjectSendStream[str]] = {}
        self._started: dict[str, float] = {}
        self._ended: dict[str, float] = {}
        self.rows: dict[str, Obligation] = {}
        self._running = 0

    async def open(self) -> None:
        await self._store.open()

    @property
    def idle(self) -> bool:
        return self._running == 0

    def handle(self, line: ReplyLine) -> None:
        now = anyio.current_time()
        feed = self._feeds.get(line.reply)
        if feed is None:
            if line.reply in self._ended:
                return  # a reply's lines after its end: nothing more to show
            send, receive = anyio.create_memory_object_stream[str](math.inf)
            self._feeds[line.reply] = feed = send
            self._started[line.reply] = now
            self._running += 1
            self._group.start_soon(self._run, line.reply, receive)
        if line.delta:
            feed.send_nowait(line.delta)
        if line.end:
            self.end(line.reply)

    def end(self, reply: str) -> None:
        feed = self._feeds.pop(reply, None)
        if feed is not None:
            self._ended[reply] = anyio.current_time()
            feed.close()

    def end_all(self) -> None:
        for reply in list(self._feeds):
            self.end(reply)

    async def _run(self, reply: str, receive: Any) -> None:
        async def deltas() -> Any:
            async with receive:
                async for delta in receive:
                    yield delta

        template = Reply(
            obligation_id=f"simulated:{reply}",
            profile="simulate",
            platform="simulate",
            channel=self._channel,
            text="",
        )
        try:
            self.rows[reply] = await answer_streamed(
                self._replies, self._ledger, template, deltas()
            )
        finally:
            self._running -= 1

    def sends(self, entries: Sequence[TranscriptEntry]) -> dict[str, ReplySends]:
        """Per reply: its posts and edits, how soon its first text and its final showed."""
        out: dict[str, ReplySends] = {}
        for reply, started in self._started.items():
            row = self.rows.get(reply)
            refs = {r.message_id for r in (*row.partials, *row.delivered)} if row else set()
            mine = [e for e in entries if e.op != "error" and e.message_id in refs]
            finals = {r.message_id for r in row.delivered} if row else set()
            last_final = max((e.t for e in mine if e.message_id in finals), default=None)
            ended = self._ended.get(reply)
            out[reply] = ReplySends(
                posts=sum(e.op == "post" for e in mine),
                edits=sum(e.op == "edit" for e in mine),
                first_text_after=round(mine[0].t - started, 6) if mine else None,
                final_after=(
                    round(last_final - ended, 6)
                    if last_final is not None and ended is not None
                    else None
                ),
                delivered=row is not None and row.state.value == "delivered",
            )
        return out
