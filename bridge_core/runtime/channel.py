"""One configured channel inside the gateway: its sender, its notifier, its agent group member,
and the reply path that joins them.

The reply path, for each turn this gateway owns::

    agent(turn, history) -> text          (AgentBusy -> a busy notice takes the reply's place)
    ledger.record(reply)                  the row first: the reply now survives a crash
    member.record_frame(turn, obligation) the turn is answered in the log
    ledger.deliver_now(row)               through this channel's sender (shared budget)

A streamed reply (the agent returned deltas) shows as it is written through ``StreamedReplies``;
its finished text takes the same path, with the partial messages' refs in the row, so the
ledger's delivery lands the final text as the last edit of those messages (ADR 0090).

The obligation id is derived from the turn's platform message id, so a crash between the row and
the frame makes the turn be answered again after the restart (no frame follows it) while the
ledger, finding the id recorded, delivers nothing twice; two gateways answering one turn deliver
one reply for the same reason.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from bridge_core.config import ChannelConfig
from bridge_core.conversation import Frame, Turn, obligation_id
from bridge_core.events import FleetEvent
from bridge_core.ledger import Obligation, Reply, State
from bridge_core.ownership import AgentBusy, AgentGroupMember, ConversationLog
from bridge_core.provider import ChatProvider, MessageRef
from bridge_core.runtime.agents import BUSY_NOTICE, Agent
from bridge_core.runtime.metrics import GatewayMetrics
from bridge_core.runtime.streaming import LedgerLike, StreamedReplies, split_reply
from bridge_core.sending import ChannelSender
from bridge_core.streams import deltas_of
from bridge_core.text import valid_text

__all__ = ["ChannelRuntime", "InProcessAgent", "LedgerLike", "NotifierLike", "split_reply"]

log = logging.getLogger("bridge_core.runtime.channel")


class NotifierLike(Protocol):
    """What the gateway needs from a channel's notifier (``bridge_core.notify.Notifier``)."""

    def handle(self, event: FleetEvent) -> None: ...

    def handle_all(self, events: Sequence[FleetEvent]) -> None: ...

    async def run(self) -> None: ...

    def end_holds(self) -> None: ...

    @property
    def idle(self) -> bool: ...

    def live_view(self) -> list[dict[str, str]]: ...


@dataclass
class ChannelRuntime:
    """A configured channel; built by the gateway, which runs its tasks."""

    name: str
    config: ChannelConfig
    profile: str
    platform: str
    provider: ChatProvider
    sender: ChannelSender
    metrics: GatewayMetrics
    ledger: LedgerLike = field(repr=False)
    replies: StreamedReplies = field(repr=False)
    # the notifier runs here alone, or where placement puts it; the log exists when an agent
    # group serves the channel, the member when an agent in this process is one of the group
    notifier: NotifierLike | None = None
    log: ConversationLog | None = None
    member: AgentGroupMember | None = None
    answered: int = 0

    @property
    def channel_id(self) -> str:
        return self.config.channel_id

    @property
    def thread(self) -> str | None:
        return self.config.thread

    @property
    def quiet(self) -> bool:
        """Nothing held by the notifier, queued or in flight at the sender."""
        return self.sender.idle and (self.notifier is None or self.notifier.idle)

    def offer_all(self, events: Sequence[FleetEvent]) -> None:
        """Hand events, in order, to the notifier if this gateway runs it (it applies the
        filters): the whole batch in one call, so the notifier's per-event work is its own
        loop's (ADR 0157)."""
        if self.notifier is not None:
            self.notifier.handle_all(events)

    # ------------------------------------------------------------------ replies

    async def record_busy(
        self, turn: Turn, notice: str | None, *, member: AgentGroupMember
    ) -> Obligation:
        """Record a busy notice as ``turn``'s reply by ``member`` (row, then frame)."""
        self.metrics.busy_notices.labels(self.name).inc()
        return await self.record_reply(turn, notice or BUSY_NOTICE, member=member)

    async def record_reply(
        self,
        turn: Turn,
        text: str,
        *,
        member: AgentGroupMember,
        partials: tuple[MessageRef, ...] = (),
    ) -> Obligation:
        """Make ``text`` the durable reply to ``turn`` by ``member``: the ledger row, then the
        frame. Once this returns the reply survives a crash; ``deliver`` sends it. ``partials``
        are a streamed reply's messages, which the final parts edit (ADR 0090)."""
        # An agent's text is a boundary too (ADR 0070): a lone surrogate or a NUL in it must not
        # fail the ledger write (NUL on PostgreSQL only) or the channel's measuring of it.
        text = valid_text(text)
        reply = Reply.answering(
            profile=self.profile,
            platform=self.platform,
            channel=turn.channel,
            answers=turn.message_id,
            text=text,
            thread=turn.thread or self.thread,
            reply_to=turn.message_id,
            chunks=split_reply(text, self.provider),
            partials=partials,
        )
        row, created = await self.ledger.record(reply)
        if not created:
            # the turn was answered before (a crash between that row and its frame): that
            # row's delivery is the answer, and this stream's messages are left over
            self.replies.mark_interrupted(partials)
        await member.record_frame(turn, reply.obligation_id)
        self.answered += 1
        self.metrics.turns_answered.labels(self.name).inc()
        return row

    async def deliver(self, row: Obligation) -> None:
        """Send a reply ``record_reply`` made durable."""
        # A row recorded before (a crash between row and frame, another gateway answering the
        # same turn) may be in anyone's hands: the claim's compare-and-swap on the fence lets
        # exactly one sender through, and a row already attempted is the sweeps' work.
        if row.state is State.PENDING and row.attempts == 0:
            await self.ledger.deliver_now(row)


class InProcessAgent:
    """An agent in this process answering the turns ``member`` owns in ``channel``: the
    member's ``on_turn`` and ``on_busy`` (the reply path in the module docstring)."""

    def __init__(self, channel: ChannelRuntime, agent: Agent, member: AgentGroupMember) -> None:
        self.channel = channel
        self.agent = agent
        self.member = member

    async def answer(self, turn: Turn, history: Sequence[Turn | Frame]) -> None:
        """``AgentGroupMember.on_turn``: run the agent and deliver its reply (AgentBusy escapes
        to the member, which calls ``busy``)."""
        called = self.agent(turn, history)
        result: object = await called if inspect.isawaitable(called) else called
        text = await deltas_of(result)
        if not isinstance(text, str):
            await self._stream(turn, text)
            return
        if not text.strip():
            log.warning(
                "agent of channel %s returned %r for turn %s; nothing to send",
                self.channel.name,
                text,
                turn.message_id,
            )
            text = "(the agent returned an empty reply)"
        await self._reply(turn, text)

    async def busy(self, turn: Turn, error: AgentBusy) -> None:
        """``AgentGroupMember.on_busy``: the busy notice is this turn's reply."""
        channel = self.channel
        await channel.deliver(await channel.record_busy(turn, error.notice, member=self.member))

    async def _stream(self, turn: Turn, deltas: AsyncIterator[str]) -> None:
        channel = self.channel
        obligation = obligation_id(channel.profile, turn.channel, turn.message_id, 0)
        try:
            result = await channel.replies.consume(
                obligation, deltas, thread=turn.thread or channel.thread
            )
            text = result.text
            if not text.strip():
                log.warning("agent of channel %s streamed an empty reply", channel.name)
                text = "(the agent returned an empty reply)"
            row = await channel.record_reply(
                turn, text, member=self.member, partials=result.partials
            )
            await channel.deliver(row)
        finally:
            await channel.replies.close(obligation)

    async def _reply(self, turn: Turn, text: str) -> None:
        channel = self.channel
        await channel.deliver(await channel.record_reply(turn, text, member=self.member))
