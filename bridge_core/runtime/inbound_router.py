"""The one way a user message reaches its channel's conversation log.

A message arrives three ways: on a provider's connection (``receive``, run under a
``ReconnectWatcher``), on one of its HTTP routes (Slack Events, Teams), or from an embedder
(``Gateway.inbound``, the demo). Every one passes the same in-process filter, per profile
(``bridge_core.inbound.filter_into`` with that profile's watcher's dedup: a replay within the
window and a bot's own message are dropped here, whichever way either came), then has its text
made valid (ADR 0070) and is admitted to the log of the channel it names, whose durable dedup
drops a replay across restarts.

``InboundRouter.run()`` keeps each profile's connection up: a dropped one is rebuilt (the new
instance takes over the channels' sending), then the platform's failed replies are resent.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, MutableMapping, MutableSet
from functools import partial
from typing import Any

import anyio

from bridge_core.config import ProfileConfig
from bridge_core.inbound import ReconnectWatcher, filter_into
from bridge_core.ledger import DeliveryLedger, DisabledLedger
from bridge_core.provider import ChatProvider, InboundMessage, InboundSink
from bridge_core.runtime.builders import platform_of
from bridge_core.runtime.channel import ChannelRuntime
from bridge_core.runtime.metrics import GatewayMetrics
from bridge_core.text import valid_text

__all__ = ["InboundRouter", "valid_message"]

log = logging.getLogger("bridge_core.runtime")


def valid_message(message: InboundMessage) -> InboundMessage:
    """Every provider's inbound message with its text made valid (ADR 0070): a lone surrogate
    or a NUL from a platform must not stop the conversation log or a ledger write."""
    fields = ("message_id", "channel", "author", "text", "thread")
    changed: dict[str, Any] = {}
    for name in fields:
        value = getattr(message, name)
        if isinstance(value, str) and (made := valid_text(value)) is not value:
            changed[name] = made
    if not changed:
        return message
    log.info(
        "inbound message %s in %s: %s held a lone surrogate or NUL; kept with U+FFFD instead",
        valid_text(str(message.message_id)),
        valid_text(str(message.channel)),
        ", ".join(changed),
    )
    return dataclasses.replace(message, **changed)


class InboundRouter:
    """Each profile's inbound connection and routes, filtered once, into the channels' logs.

    ``providers`` is the gateway's live map of profile to provider instance (a reconnect
    replaces an entry); ``connected`` the profiles whose connection is up (a profile the
    platform refused for good is taken out); ``rebuild(profile)`` makes a new instance after a
    drop, unless the profile's provider was ``given`` (an embedder's instance is reused).
    ``channels`` are the channels by name, ``by_platform`` by (profile, platform channel id).
    """

    def __init__(
        self,
        *,
        profiles: Mapping[str, ProfileConfig],
        providers: MutableMapping[str, ChatProvider],
        given: frozenset[str],
        rebuild: Callable[[str], ChatProvider],
        channels: Mapping[str, ChannelRuntime],
        by_platform: Mapping[tuple[str, str], ChannelRuntime],
        connected: MutableSet[str],
        ledger: DeliveryLedger | DisabledLedger,
        metrics: GatewayMetrics,
        reconnect_backoff: float,
    ) -> None:
        self._profiles = profiles
        self._providers = providers
        self._given = given
        self._rebuild = rebuild
        self._channels = channels
        self._by_platform = by_platform
        self._connected = connected
        self._ledger = ledger
        self._metrics = metrics
        self._reconnect_backoff = reconnect_backoff
        # built now, run by run(): a route's message may come before its connection is up,
        # and passes the same dedup the connection's messages will
        self._watchers = {profile: self._watcher(profile) for profile in providers}

    async def run(self) -> None:
        """Keep every profile's inbound connection up until cancelled."""
        async with anyio.create_task_group() as tg:
            for profile, watcher in self._watchers.items():
                tg.start_soon(self._watch, profile, watcher)

    async def inbound(self, profile: str, message: InboundMessage) -> bool:
        """A message of ``profile``'s platform, whichever way it came, through the filter into
        its channel's log; True when it was admitted as a new turn."""
        watcher = self._watchers.get(profile)
        if watcher is None:
            log.debug("inbound message as %s: no such profile serves it", profile)
            return False
        admitted = await filter_into(partial(self._admit, profile), message, dedup=watcher.dedup)
        return admitted is True

    def sink(self, profile: str) -> InboundSink:
        """What ``profile``'s provider's HTTP routes hand their messages to."""

        async def sink(message: InboundMessage) -> None:
            await self.inbound(profile, message)

        return sink

    # ------------------------------------------------------------------ connections

    def _watcher(self, profile: str) -> ReconnectWatcher:
        first = self._providers[profile]
        built = 0

        async def factory() -> ChatProvider:
            nonlocal built
            built += 1
            if built == 1 or profile in self._given:
                return first
            return self._rebuild(profile)

        async def reconnected(platform: str) -> None:
            provider = watcher.provider
            assert provider is not None  # the watcher reports a reconnect once it has built one
            self._take_over(profile, provider)
            log.info("profile %s reconnected; resending %s's failed replies", profile, platform)
            await self._ledger.redeliver_failed(platform)

        # the watcher's own filter (its messages') and inbound() (everyone else's) share its dedup
        watcher = ReconnectWatcher(
            factory,
            self._log_sink(profile),
            platform=platform_of(self._profiles[profile]),
            on_reconnected=reconnected,
            initial_backoff=self._reconnect_backoff,
        )
        return watcher

    async def _watch(self, profile: str, watcher: ReconnectWatcher) -> None:
        await watcher.run()
        if watcher.gave_up is not None:
            self._connected.discard(profile)

    def _take_over(self, profile: str, provider: ChatProvider) -> None:
        """The rebuilt ``provider`` serves ``profile`` now: its channels send through it."""
        self._providers[profile] = provider
        for channel in self._channels.values():
            if channel.profile == profile:
                channel.provider = provider
                channel.sender.rebind(provider)
        self._connected.add(profile)

    # ------------------------------------------------------------------ admission

    def _log_sink(self, profile: str) -> InboundSink:
        async def sink(message: InboundMessage) -> None:
            await self._admit(profile, message)

        return sink

    async def _admit(self, profile: str, message: InboundMessage) -> bool:
        message = valid_message(message)
        channel = self._by_platform.get((profile, message.channel))
        if channel is None or channel.log is None:
            log.debug("inbound message in %s/%s: no agent serves it", profile, message.channel)
            return False
        if not message.profile or not message.platform:
            message = dataclasses.replace(
                message, profile=message.profile or profile, platform=channel.platform
            )
        turn = await channel.log.admit(message)
        if turn is None:
            return False
        self._metrics.turns_admitted.labels(channel.name).inc()
        return True
