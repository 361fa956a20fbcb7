"""Assembling a gateway's parts for its one run, in order: the ledger (and the key-value store
the providers keep beside it), a provider per profile, the scale-out plumbing when the gateways
share a Redis, then every channel with its sender, notifier and agent group member.

``assemble`` builds with the ``builders``; everything it opens is closed on the
``AsyncExitStack`` it is handed. What it returns is built whole: nothing in it is filled in
later.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, MutableMapping, MutableSet
from contextlib import AsyncExitStack
from dataclasses import dataclass
from functools import partial

from bridge_core.config import BridgeConfig
from bridge_core.ledger import Delivery, DeliveryLedger, DisabledLedger, LedgerStore
from bridge_core.provider import ChatProvider, KeyValueStore, MessageRef, Unreachable
from bridge_core.runtime.agents import Agent
from bridge_core.runtime.builders import (
    ScaleOut,
    agent_for,
    channel_runtime,
    conversation_log_target,
    join_agent_group,
    make_provider,
    notifier_for,
    open_channel_log,
    open_ledger,
    open_scale_out,
    provider_key_values,
)
from bridge_core.runtime.channel import ChannelRuntime
from bridge_core.runtime.metrics import GatewayMetrics
from bridge_core.runtime.options import GatewayOptions

__all__ = ["Assembly", "assemble", "deliver_reply"]

log = logging.getLogger("bridge_core.runtime")

ChannelsByPlatform = dict[tuple[str, str], ChannelRuntime]


@dataclass(frozen=True, slots=True)
class Assembly:
    """A gateway's parts for one run. ``store`` is ``None`` when the config turns the ledger
    off; ``scale_out`` is ``None`` for a gateway alone (no shared Redis)."""

    ledger: DeliveryLedger | DisabledLedger
    store: LedgerStore | None
    kv: KeyValueStore
    scale_out: ScaleOut | None
    by_platform: Mapping[tuple[str, str], ChannelRuntime]
    """The channels by (profile, platform channel id): where inbound and replies find theirs."""


async def deliver_reply(
    by_platform: Mapping[tuple[str, str], ChannelRuntime], delivery: Delivery
) -> MessageRef:
    """The ledger's delivery: a reply sent through its channel's sender, at the priority that
    keeps replies ahead of notifications."""
    channel = by_platform.get((delivery.profile, delivery.channel))
    if channel is None:
        raise Unreachable(
            f"no channel {delivery.channel!r} of profile {delivery.profile!r} is configured "
            "in this gateway"
        )
    # through the channel's streamed replies: a streamed reply's parts edit its partial
    # messages, any other reply is posted at the terminal priority
    return await channel.replies.deliver(delivery)


async def assemble(
    stack: AsyncExitStack,
    config: BridgeConfig,
    *,
    options: GatewayOptions,
    gateway_id: str,
    metrics: GatewayMetrics,
    agents: Mapping[str, Agent],
    providers: MutableMapping[str, ChatProvider],
    channels: MutableMapping[str, ChannelRuntime],
    connected: MutableSet[str],
) -> Assembly:
    """Build the gateway's parts. ``providers`` (the embedder's, by profile) gets an instance
    for every other profile, ``channels`` every configured channel by name, and ``connected``
    every profile: the gateway's live maps, which a reconnect later updates."""
    by_platform: ChannelsByPlatform = {}
    store, ledger = await open_ledger(
        stack,
        config.stores,
        options=options,
        deliver=partial(deliver_reply, by_platform),
        profiles=config.profiles,
        connected=lambda platform: platform in _connected_platforms(channels, connected),
    )
    kv = provider_key_values(store)
    _open_providers(stack, config, providers=providers, connected=connected, kv=kv, options=options)
    scale_out: ScaleOut | None = None  # with Redis, gateways share budgets and notifiers
    if config.stores.membership_url is not None:
        scale_out = await open_scale_out(
            stack, config.stores.membership_url, options=options, gateway_id=gateway_id
        )
    for name, channel_config in config.channels.items():
        channel = channel_runtime(
            name,
            channel_config,
            profile=config.profiles[channel_config.profile],
            provider=providers[channel_config.profile],
            budgets=scale_out.budgets if scale_out is not None else None,
            metrics=metrics,
            ledger=ledger,
            kv=kv,
        )
        if scale_out is None:  # else placement decides which gateway runs it (hosting)
            channel.notifier = notifier_for(channel)
        await _give_agent(
            stack, config, channel, agents=agents, options=options, gateway_id=gateway_id
        )
        channels[name] = channel
        by_platform[(channel_config.profile, channel_config.channel_id)] = channel
    return Assembly(ledger=ledger, store=store, kv=kv, scale_out=scale_out, by_platform=by_platform)


def _connected_platforms(
    channels: Mapping[str, ChannelRuntime], connected: MutableSet[str]
) -> set[str]:
    return {c.platform for c in channels.values() if c.profile in connected}


def _open_providers(
    stack: AsyncExitStack,
    config: BridgeConfig,
    *,
    providers: MutableMapping[str, ChatProvider],
    connected: MutableSet[str],
    kv: KeyValueStore,
    options: GatewayOptions,
) -> None:
    for name, profile in config.profiles.items():
        if name not in providers:
            providers[name] = make_provider(name, profile, kv=kv, public_url=options.public_url)
            # the current instance (a reconnect replaces it) is closed at the end
            stack.push_async_callback(_close_current, providers, name)
        connected.add(name)


async def _close_current(providers: Mapping[str, ChatProvider], name: str) -> None:
    await providers[name].aclose()


async def _give_agent(
    stack: AsyncExitStack,
    config: BridgeConfig,
    channel: ChannelRuntime,
    *,
    agents: Mapping[str, Agent],
    options: GatewayOptions,
    gateway_id: str,
) -> None:
    """``channel``'s agent group: this gateway's member with the agent given or configured for
    it, or only its log when connected agents serve it (``agent_group``), or none."""
    agent = agent_for(
        channel.name, channel.config.agent, given=agents, default=options.default_agent
    )
    log_target = conversation_log_target(config)
    if agent is not None:
        await join_agent_group(
            stack, channel, agent, log_target=log_target, options=options, gateway_id=gateway_id
        )
    elif channel.config.agent_group is not None:  # served by connected agents only
        await open_channel_log(stack, channel, log_target=log_target, options=options)
