"""Building a gateway's parts from the config: its providers, the delivery ledger, the scale-out
plumbing (shared send budgets, the fleet bus, notifier placement), per channel its sender,
notifier and agent group member, and the HTTP API's listener.

Nothing here runs anything: ``Gateway`` calls these while it starts and then runs what they
return. A builder that opens a connection or a file registers its closing on the
``AsyncExitStack`` it is handed, so everything opened is closed in reverse order when the gateway
stops, or when a later part fails to build.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from aiohttp import web

from bridge_core.config import BridgeConfig, ChannelConfig, ProfileConfig, StoresConfig
from bridge_core.hookspecs import ProviderContext
from bridge_core.ledger import Deliver, DeliveryLedger, DisabledLedger, LedgerStore, open_store
from bridge_core.ledger.kv import MemoryKeyValueStore, key_value_store
from bridge_core.notify import Notifier, NotifyConfig
from bridge_core.ownership import AgentGroupMember, ConversationLog, open_conversation_log
from bridge_core.provider import UNLIMITED_BUDGET, ChatProvider, HttpRoute, KeyValueStore
from bridge_core.runtime.agents import Agent, load_agent
from bridge_core.runtime.channel import ChannelRuntime, InProcessAgent, LedgerLike
from bridge_core.runtime.http_api import ApiBackend, Handler, build_app
from bridge_core.runtime.metrics import GatewayMetrics
from bridge_core.runtime.options import GatewayError, GatewayOptions
from bridge_core.runtime.placement import GATEWAYS_GROUP, FleetBus, NotifierPlacement
from bridge_core.runtime.shared_budget import SharedBudgets
from bridge_core.runtime.streaming import StreamedReplies
from bridge_core.sending import ChannelSender

__all__ = [
    "ScaleOut",
    "agent_for",
    "channel_runtime",
    "conversation_log_target",
    "join_agent_group",
    "make_provider",
    "notifier_for",
    "open_channel_log",
    "open_ledger",
    "open_scale_out",
    "platform_of",
    "provider_key_values",
    "serve_http_api",
]


# ---------------------------------------------------------------------- providers


def platform_of(profile: ProfileConfig) -> str:
    """The platform a profile's provider serves (its configured name until the type resolves)."""
    return profile.provider_type.name if profile.provider_type else profile.provider


def make_provider(
    name: str, profile: ProfileConfig, *, kv: KeyValueStore, public_url: str | None
) -> ChatProvider:
    """A new provider instance for profile ``name`` (at start, and again after each reconnect)."""
    if profile.provider_type is None:
        raise GatewayError(f"profile {name!r}: provider {profile.provider!r} is not resolved")
    context = ProviderContext(profile=name, kv=kv, public_url=public_url)
    return profile.provider_type.factory(profile.settings, context)


def provider_key_values(store: LedgerStore | None) -> KeyValueStore:
    """The providers' key-value store: beside the ledger, or in memory without one."""
    return key_value_store(store) if store is not None else MemoryKeyValueStore()


# ---------------------------------------------------------------------- the delivery ledger


async def open_ledger(
    stack: AsyncExitStack,
    stores: StoresConfig,
    *,
    options: GatewayOptions,
    deliver: Deliver,
    profiles: Collection[str],
    connected: Callable[[str], bool],
) -> tuple[LedgerStore | None, DeliveryLedger | DisabledLedger]:
    """The delivery ledger and its store; no store when the config turns the ledger off."""
    if not stores.delivery_ledger:
        return None, DisabledLedger(deliver=deliver)
    where = stores.ledger_url or str(stores.ledger_path)
    store = await open_store(
        where,
        owner=options.ledger_owner,
        table_prefix=options.ledger_table_prefix,
        sqlite_writer=options.ledger_writer,
        # a dead gateway's replies are taken over when its membership would expire, renewed
        # four times a lease: the same liveness its turns move on (ADR 0019)
        lease=options.ledger_lease
        if options.ledger_lease is not None
        else options.membership_expiry,
    )
    stack.push_async_callback(store.aclose)
    ledger = DeliveryLedger(
        store,
        deliver=deliver,
        # DeliveryLedger refuses an empty set; "-" names no profile, so without profiles it
        # claims nothing
        profiles=set(profiles) or {"-"},
        connected=connected,
        schedule=options.ledger_schedule,
        # the channel's sender awaits Delivery.begin once the budget grants the post, so a
        # reply queued behind the channel's pacing at a crash is resent clean, not labelled
        deliver_begins=True,
    )
    return store, ledger


# ---------------------------------------------------------------------- scale-out


@dataclass(frozen=True, slots=True)
class ScaleOut:
    """What the gateways sharing one Redis share: each channel's send budget, the fleet's
    events, and which of them hosts each channel's notifier."""

    budgets: SharedBudgets
    bus: FleetBus
    placement: NotifierPlacement


async def open_scale_out(
    stack: AsyncExitStack, url: str, *, options: GatewayOptions, gateway_id: str
) -> ScaleOut:
    """Connect to the Redis at ``url`` the gateways share, as gateway ``gateway_id``."""
    budgets = SharedBudgets.connect(url, prefix=options.key_prefix)
    stack.push_async_callback(budgets.aclose)
    bus = FleetBus.connect(url, prefix=options.key_prefix)
    stack.push_async_callback(bus.aclose)
    gateways_log = await open_conversation_log(
        url, channel=GATEWAYS_GROUP, key_prefix=options.key_prefix
    )
    stack.push_async_callback(gateways_log.aclose)
    placement = NotifierPlacement(
        gateways_log,
        gateway_id=gateway_id,
        settle=options.settle,
        heartbeat=options.heartbeat,
        expiry=options.expiry,
    )
    return ScaleOut(budgets=budgets, bus=bus, placement=placement)


# ---------------------------------------------------------------------- channels


def channel_runtime(
    name: str,
    config: ChannelConfig,
    *,
    profile: ProfileConfig,
    provider: ChatProvider,
    budgets: SharedBudgets | None,
    metrics: GatewayMetrics,
    ledger: LedgerLike,
    kv: KeyValueStore | None = None,
) -> ChannelRuntime:
    """Channel ``name`` with its sender (on the budget shared with the other gateways, when
    there are any) and its streamed replies (their partial refs in ``kv``); its notifier and
    agent group member are added separately."""
    budget = profile.send_budget or UNLIMITED_BUDGET
    shared = f"{config.profile}/{config.channel_id}"
    sender = ChannelSender(
        provider,
        channel=config.channel_id,
        budget=budget,
        thread=config.thread,
        gate=budgets.gate(shared, budget) if budgets is not None else None,
    )
    # a send or probe that succeeds gives the replies parked for this channel their last
    # attempt now, not at the next start (ADR 0029)
    sender.health.on_proven(partial(ledger.channel_proven, config.profile, config.channel_id))
    replies = StreamedReplies(
        sender,
        lambda: runtime.provider,  # a reconnect replaces the provider
        kv=kv,
    )
    runtime = ChannelRuntime(
        name=name,
        config=config,
        profile=config.profile,
        platform=platform_of(profile),
        provider=provider,
        sender=sender,
        metrics=metrics,
        ledger=ledger,
        replies=replies,
    )
    return runtime


def notifier_for(channel: ChannelRuntime) -> Notifier:
    """A new notifier for ``channel``, sending through its sender."""
    config = channel.config
    return Notifier(
        config.channel_id,
        channel.sender,
        capabilities=channel.provider.capabilities,
        config=NotifyConfig.for_channel(config),
        escape=channel.provider.escape,
        thread=config.thread,
    )


def agent_for(
    channel: str, reference: str | None, *, given: Mapping[str, Agent], default: str | None
) -> Agent | None:
    """The agent answering in ``channel``: one ``given`` for it, else the one its ``reference``
    (or the ``default`` reference) names, else none."""
    if channel in given:
        return given[channel]
    reference = reference or default
    return load_agent(reference) if reference else None


def conversation_log_target(config: BridgeConfig) -> str:
    """Where the channels' conversation logs live: the shared Redis, else a SQLite file (the
    ledger's, or ``bridge-log.sqlite3`` beside the config)."""
    stores = config.stores
    if stores.membership_url is not None:
        return stores.membership_url
    if stores.ledger_path is not None:
        return str(stores.ledger_path)
    base = config.path.parent if config.path is not None else Path.cwd()
    return str(base / "bridge-log.sqlite3")


async def open_channel_log(
    stack: AsyncExitStack, channel: ChannelRuntime, *, log_target: str, options: GatewayOptions
) -> ConversationLog:
    """Open ``channel``'s conversation log (its agent group: in-process or connected agents)."""
    log = await open_conversation_log(
        log_target,
        channel=channel.config.channel_id,
        key_prefix=options.key_prefix,
    )
    stack.push_async_callback(log.aclose)
    channel.log = log
    return log


async def join_agent_group(
    stack: AsyncExitStack,
    channel: ChannelRuntime,
    agent: Agent,
    *,
    log_target: str,
    options: GatewayOptions,
    gateway_id: str,
) -> None:
    """Give ``channel`` its ``agent``, its conversation log and this gateway's member of the
    channel's agent group, which hands the turns it owns to the agent."""
    log = channel.log
    if log is None:
        log = await open_channel_log(stack, channel, log_target=log_target, options=options)
    answering: InProcessAgent  # made just below, before the member can hand it a turn
    channel.member = AgentGroupMember(
        log,
        member_id=gateway_id,
        on_turn=lambda turn, history: answering.answer(turn, history),
        on_busy=lambda turn, error: answering.busy(turn, error),
        settle=options.settle,
        heartbeat=options.heartbeat,
        expiry=options.expiry,
        lookback=options.lookback,
        drain_timeout=options.grace,
    )
    answering = InProcessAgent(channel, agent, channel.member)


# ---------------------------------------------------------------------- the HTTP API


async def serve_http_api(
    stack: AsyncExitStack,
    backend: ApiBackend,
    *,
    host: str,
    port: int,
    token: str | None,
    max_body: int,
    provider_routes: Sequence[HttpRoute],
    agent_socket: Handler | None = None,
) -> str:
    """Listen on ``host:port`` and serve ``backend``'s HTTP API there; returns its URL (with
    the port bound, when ``port`` is 0)."""
    app = build_app(
        backend,
        token=token,
        max_body=max_body,
        provider_routes=provider_routes,
        agent_socket=agent_socket,
    )
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    stack.push_async_callback(runner.cleanup)
    site = web.TCPSite(runner, host, port, reuse_address=True)
    try:
        await site.start()
    except OSError as exc:
        raise GatewayError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}; choose another "
            "port with [api] port or --port"
        ) from exc
    bound_host, bound_port = runner.addresses[0][:2]
    return f"http://{bound_host if ':' not in bound_host else f'[{bound_host}]'}:{bound_port}"
