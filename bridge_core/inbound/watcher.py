"""Keeping a provider's inbound connection up: rebuild on a drop, back off, give up when told.

``ReconnectWatcher.run()`` builds a provider instance with ``factory`` and runs its
``receive(sink)``. When that raises ``ConnectionLost`` or another ``TransportError`` (or the
factory does), it closes the instance, waits (30 s, doubling to a 300 s cap), builds a new one
whose ``InboundDedup`` adopts the old one's live ids, and calls ``on_reconnected(platform)`` (the
runtime redelivers the ledger's failed rows for that platform). Transient failures are retried
forever; a permanent one (``Unreachable``) ends ``run()`` after one clear log line. The backoff
starts over once a rebuilt connection has delivered a message or stayed up for
``initial_backoff`` seconds. Time comes from anyio, so the schedule runs on virtual time in
tests. ``statistics()`` is its counters and state as one frozen snapshot.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import anyio

from bridge_core.inbound.dedup import InboundDedup, deduplicated
from bridge_core.inbound.statistics import WatcherStatistics
from bridge_core.provider import (
    ChatProvider,
    InboundMessage,
    InboundSink,
    TransportError,
    Unreachable,
)

__all__ = ["DEFAULT_INITIAL_BACKOFF", "DEFAULT_MAX_BACKOFF", "ReconnectWatcher", "backoff_delay"]

logger = logging.getLogger("bridge_core.inbound")

DEFAULT_INITIAL_BACKOFF = 30.0
DEFAULT_MAX_BACKOFF = 300.0

ProviderFactory = Callable[[], Awaitable[ChatProvider]]


def backoff_delay(attempt: int, *, initial: float, cap: float) -> float:
    """The wait before reconnect ``attempt`` (0-based): ``initial * 2**attempt``, capped."""
    return min(cap, initial * 2.0 ** min(attempt, 32))


def _marking(sink: InboundSink, delivered: anyio.Event) -> InboundSink:
    async def marked(message: InboundMessage) -> None:
        delivered.set()
        await sink(message)

    return marked


class ReconnectWatcher:
    """Runs one platform connection's ``receive`` and rebuilds it when it drops."""

    def __init__(
        self,
        factory: ProviderFactory,
        sink: InboundSink,
        *,
        platform: str,
        on_reconnected: Callable[[str], Awaitable[None]] | None = None,
        dedup_factory: Callable[[], InboundDedup] = InboundDedup,
        initial_backoff: float = DEFAULT_INITIAL_BACKOFF,
        max_backoff: float = DEFAULT_MAX_BACKOFF,
    ) -> None:
        self.factory = factory
        self.sink = sink
        self.platform = platform
        self.on_reconnected = on_reconnected
        self.dedup_factory = dedup_factory
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff
        self.provider: ChatProvider | None = None
        self.dedup: InboundDedup = dedup_factory()
        self.reconnects = 0
        self.gave_up: Unreachable | None = None
        self.delays: list[float] = []  # every backoff wait, for health and tests
        self._build_failures = 0
        self._connections_lost = 0
        self._receiving = False

    def statistics(self) -> WatcherStatistics:
        """Its counters since it was made and its state now, as one snapshot."""
        return WatcherStatistics(
            reconnects=self.reconnects,
            backoffs=len(self.delays),
            build_failures=self._build_failures,
            connections_lost=self._connections_lost,
            receiving=self._receiving,
            last_backoff=self.delays[-1] if self.delays else None,
            gave_up=str(self.gave_up) if self.gave_up is not None else None,
            dedup_ids=len(self.dedup),
        )

    async def run(self) -> None:
        """Receive until cancelled, or until the platform says it will never work."""
        attempt = 0
        first = True
        while True:
            try:
                if not first:
                    delay = backoff_delay(
                        attempt, initial=self.initial_backoff, cap=self.max_backoff
                    )
                    self.delays.append(delay)
                    await anyio.sleep(delay)
                    attempt += 1
                provider = await self.factory()
            except Unreachable as error:
                self._give_up(error)
                return
            except TransportError as error:
                self._build_failures += 1
                logger.warning(
                    "%s: building the provider failed (%r); retrying", self.platform, error
                )
                first = False
                continue
            if not first:
                # the new instance drops what the old one already handed over
                dedup = self.dedup_factory()
                dedup.adopt(self.dedup)
                self.dedup = dedup
                self.reconnects += 1
            self.provider = provider
            if not first and self.on_reconnected is not None:
                try:
                    await self.on_reconnected(self.platform)
                except Exception:
                    logger.exception("%s: on_reconnected failed", self.platform)
            first = False
            healthy = anyio.Event()
            started = anyio.current_time()
            try:
                self._receiving = True
                try:
                    await provider.receive(_marking(deduplicated(self.sink, self.dedup), healthy))
                finally:
                    self._receiving = False
                return  # a provider without a connection returns at once
            except Unreachable as error:
                await self._close(provider)
                self._give_up(error)
                return
            except TransportError as error:
                self._connections_lost += 1
                logger.warning(
                    "%s: inbound connection lost (%r); reconnecting with backoff",
                    self.platform,
                    error,
                )
                await self._close(provider)
                if healthy.is_set() or anyio.current_time() - started >= self.initial_backoff:
                    attempt = 0

    def _give_up(self, error: Unreachable) -> None:
        self.gave_up = error
        logger.error(
            "%s: giving up on the inbound connection, the platform says it will never work "
            "(%s); fix the credentials or the bot's access and restart",
            self.platform,
            error,
        )

    async def _close(self, provider: ChatProvider) -> None:
        with anyio.CancelScope(shield=True):
            try:
                await provider.aclose()
            except Exception:
                logger.exception("%s: closing the failed provider instance failed", self.platform)
