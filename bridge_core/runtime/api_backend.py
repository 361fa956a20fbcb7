"""The backend behind the gateway's HTTP API and agent socket: what ``POST /v1/events``,
``POST /v1/messages``, ``/healthz``, ``/metrics`` and ``/v1/status`` do, on the parts a gateway
assembled for its run.

Events are offered to each channel's notifier (or, with gateways sharing a Redis, published on
the fleet bus, where the gateway hosting each notifier takes them); a message becomes a ledger
row first and is delivered after, so a 202 means it survives a crash. New work is taken only
while the gateway serves (``Lifecycle``): starting or stopping, the answer is a 503.
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence, Set
from typing import Any

from bridge_core.conversation import obligation_id
from bridge_core.events import FleetEvent
from bridge_core.ledger import LedgerStatistics, Obligation, RecordInFlight, Reply
from bridge_core.provider import ChatProvider
from bridge_core.runtime.assembly import Assembly
from bridge_core.runtime.channel import ChannelRuntime, split_reply
from bridge_core.runtime.http_api import ApiError, Health, MessageReceipt, MessageRequest
from bridge_core.runtime.lifecycle import Lifecycle
from bridge_core.runtime.metrics import GatewayMetrics, Snapshot
from bridge_core.runtime.status import gateway_status

__all__ = ["GatewayApi"]

log = logging.getLogger("bridge_core.runtime")


class GatewayApi:
    """``ApiBackend`` (``runtime.http_api``) and ``AgentHost`` (``runtime.agent_host``)
    for one gateway's run. ``url`` is the API's address once it is bound (``None`` without
    HTTP)."""

    def __init__(
        self,
        parts: Assembly,
        *,
        gateway_id: str,
        channels: Mapping[str, ChannelRuntime],
        providers: Mapping[str, ChatProvider],
        connected: Set[str],
        metrics: GatewayMetrics,
        lifecycle: Lifecycle,
    ) -> None:
        self.gateway_id = gateway_id
        self.url: str | None = None
        self.channels = channels
        self._parts = parts
        self._providers = providers
        self._connected = connected
        self._metrics = metrics
        self._lifecycle = lifecycle
        # Channels with a reply recorded already claimed and not yet sent: one at a time each,
        # so a claimed reply never queues behind another (ADR 0121).
        self._begun: set[str] = set()

    @property
    def accepting(self) -> bool:
        """Serving and taking new work (False while starting and once stopping)."""
        return self._lifecycle.accepting

    def channel_names(self) -> Sequence[str]:
        return list(self.channels)

    def agent_channel(self, name: str) -> ChannelRuntime | None:
        return self.channels.get(name)

    def send_recorded_soon(self, channel: ChannelRuntime, row: Obligation) -> bool:
        if not self._lifecycle.accepting:
            return False
        self._lifecycle.tasks_for_new_work().start_soon(channel.deliver, row)
        return True

    async def accept_events(self, events: Sequence[FleetEvent]) -> None:
        self._lifecycle.tasks_for_new_work()
        scale_out = self._parts.scale_out
        if scale_out is not None:
            await scale_out.bus.publish(list(self.channels), events)
        if scale_out is None:
            for channel in self.channels.values():  # each channel takes the batch in order
                channel.offer_all(events)
        # Counted by class, in C (``map``, ``list.count`` and ``Counter`` run no bytecode per
        # event); a class's ``kind`` is its label (UnknownEvent's is "Unknown"), one increment
        # per kind. A batch of one kind, the common one, is told by an identity count, a tenth
        # of what ``Counter`` pays for hashing each class.
        classes: list[type[FleetEvent]] = [*map(type, events)]
        if not classes:
            return
        first = classes[0]
        if classes.count(first) == len(classes):
            self._metrics.events_in.labels(first.kind).inc(len(classes))
            return
        for cls, count in Counter(classes).items():
            self._metrics.events_in.labels(cls.kind).inc(count)

    async def accept_message(self, request: MessageRequest) -> MessageReceipt:
        tasks = self._lifecycle.tasks_for_new_work()
        channel = self.channels.get(request.channel)
        if channel is None:
            raise ApiError(404, f"channel {request.channel!r} is not configured", field="channel")
        answers = f"api:{request.idempotency_key or uuid.uuid4().hex}"
        reply = Reply(
            obligation_id=obligation_id(channel.profile, channel.channel_id, answers),
            profile=channel.profile,
            platform=channel.platform,
            channel=channel.channel_id,
            text=request.text,
            thread=request.thread or channel.thread,
            chunks=split_reply(request.text, channel.provider),
        )
        ledger = self._parts.ledger
        # A channel whose sender would post this at once: the row is recorded already claimed,
        # one commit before the send instead of two (the claim is then this send's, as it
        # would have been at its turn: ADR 0121).
        claim = channel.name not in self._begun and channel.sender.sends_at_once()
        recording: RecordInFlight | None = None
        started = False  # the task that sends the recorded row, and ends the channel's claim
        if claim:
            self._begun.add(channel.name)
        try:
            # Claimed, the record is queued now; once its COMMIT begins the send is made ready
            # while the fsync runs, and it waits for the commit in its begin(), woken before
            # this handler (ADR 0164). Otherwise the row is recorded, then delivered.
            recording = ledger.record_soon(reply) if claim else None
            if recording is not None:
                await recording.committing()
                tasks.start_soon(self._send_recorded, recording, channel.name)
                started = True
                row, created = await recording.committed()
            else:
                row, created = await ledger.record(reply, claim=claim)
        except BaseException:
            if recording is not None and not started:
                # cancelled before the send was made ready: its task still sends the row (if
                # this record created it) rather than leave it claimed and unsent
                tasks.start_soon(self._send_recorded, recording, channel.name)
            elif not started:
                self._begun.discard(channel.name)
            raise
        self._metrics.messages_accepted.labels(channel.name).inc()
        if recording is None:
            if created:
                tasks.start_soon(self._deliver, row, channel.name if claim else None)
            elif claim:
                self._begun.discard(channel.name)
        if not created and (row.text, row.thread) != (reply.text, reply.thread):
            # the key names another message: a 202 would say this one is recorded
            raise ApiError(
                409,
                f"idempotency_key {request.idempotency_key!r} was used for a different message "
                "(its text or thread differs); use a new key for a new message",
                field="idempotency_key",
            )
        return MessageReceipt(obligation=row.id, duplicate=not created)

    async def _send_recorded(self, recording: RecordInFlight, begun: str) -> None:
        try:
            await self._parts.ledger.send_recorded(recording)
        finally:
            self._begun.discard(begun)

    async def _deliver(self, row: Obligation, begun: str | None) -> None:
        try:
            await self._parts.ledger.deliver_now(row)
        finally:
            if begun is not None:
                self._begun.discard(begun)

    async def health(self) -> Health:
        channels: dict[str, dict[str, Any]] = {}
        for name, channel in self.channels.items():
            sender = channel.sender.statistics()
            channels[name] = {
                "healthy": sender.healthy,
                "reason": sender.health_reason,
                "profile": channel.profile,
                "paused": sender.paused,
                "queued": sender.queued,
                "notifier_here": channel.notifier is not None,
            }
        providers = {
            name: {
                "healthy": name in self._connected,
                "provider": type(provider).__name__,
            }
            for name, provider in self._providers.items()
        }
        return Health(channels=channels, providers=providers)

    async def status(self) -> dict[str, Any]:
        return await gateway_status(self)

    async def ledger_statistics(self) -> LedgerStatistics:
        return await self._parts.ledger.statistics()

    async def ledger_counts(self) -> dict[str, int]:
        return (await self.ledger_statistics()).by_state()

    async def metrics_text(self) -> bytes:
        snapshot = Snapshot(ledger_rows=await self.ledger_counts())
        for name, channel in self.channels.items():
            sender = channel.sender.statistics()
            snapshot.sends[name] = sender.posts
            snapshot.edits[name] = sender.edits
            snapshot.rate_limit_pauses[name] = sender.rate_limit_pauses
            snapshot.channel_healthy[name] = sender.healthy
            if channel.log is not None:
                try:
                    snapshot.group_members[name] = (await channel.log.statistics()).members
                except Exception as error:
                    log.warning("metrics: members of %s unavailable: %r", name, error)
        self._metrics.set_snapshot(snapshot)
        return self._metrics.render()
