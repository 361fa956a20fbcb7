"""The gateway: one process serving every configured channel.

``Gateway(config).run()`` (or ``async with Gateway(config) as gw``) builds a provider per bot
profile, a ``ChannelSender`` per channel, the delivery ledger (its boot sweep runs before anything
is served), per channel the notifier and an agent group member handing owned turns to the
configured agent, and the HTTP API; then serves until ``stop()``. How each part is built from the
config is in ``builders``; this module starts, connects and stops them.

Shutdown (``stop()``, which the CLI calls on SIGTERM/SIGINT): new work is refused (the API answers
503), inbound and event sources stop, members finish their in-flight turns and leave, and the
senders get until the grace period ends to finish what they are sending; whatever is left stays in
the ledger for the next start. ``run()`` then returns normally.

``GatewayOptions``, ``GatewayError`` and ``check_bind`` are defined in ``options`` and exported
here too, beside the ``Gateway`` that takes and raises them.

Exception hierarchy::

    GatewayError          the gateway cannot start as configured (message says how to fix it)
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from typing import Any

import anyio
from anyio.abc import TaskGroup, TaskStatus

from bridge_core.config import BridgeConfig
from bridge_core.conversation import obligation_id
from bridge_core.events import FleetEvent, UnknownEvent
from bridge_core.ledger import Delivery, DeliveryLedger, DisabledLedger, LedgerStore, Reply, State
from bridge_core.ledger.kv import MemoryKeyValueStore
from bridge_core.notify import Notifier
from bridge_core.provider import (
    ChatProvider,
    InboundMessage,
    KeyValueStore,
    MessageRef,
    Unreachable,
)
from bridge_core.runtime.agent_socket import AgentSockets, AgentSocketSettings
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
    serve_http_api,
)
from bridge_core.runtime.channel import ChannelRuntime, split_reply
from bridge_core.runtime.http_api import (
    ApiError,
    Health,
    MessageReceipt,
    MessageRequest,
    ShuttingDown,
)
from bridge_core.runtime.inbound_router import InboundRouter
from bridge_core.runtime.metrics import GatewayMetrics, Snapshot
from bridge_core.runtime.options import GatewayError, GatewayOptions, check_bind
from bridge_core.runtime.placement import FleetBus, NotifierPlacement, wait_until
from bridge_core.runtime.status import gateway_status
from bridge_core.sending import Post, Priority

__all__ = ["Gateway", "GatewayError", "GatewayOptions", "check_bind"]

log = logging.getLogger("bridge_core.runtime")


def _idle_check(notifier: Notifier) -> Callable[[], bool]:
    return lambda: notifier.idle


class Gateway:
    """See the module docstring. ``providers`` and ``agents`` (by profile / channel name) replace
    what the config would build, for embedding and the demo."""

    def __init__(
        self,
        config: BridgeConfig,
        *,
        options: GatewayOptions | None = None,
        providers: Mapping[str, ChatProvider] | None = None,
        agents: Mapping[str, Agent] | None = None,
    ) -> None:
        self.config = config
        self.options = options or GatewayOptions()
        self.gateway_id = self.options.gateway_id or f"{socket.gethostname()}:{os.getpid()}"
        self.metrics = GatewayMetrics()
        self.channels: dict[str, ChannelRuntime] = {}
        self.providers: dict[str, ChatProvider] = dict(providers or {})
        self._given_providers = frozenset(self.providers)
        self._agents = dict(agents or {})
        self._by_platform: dict[tuple[str, str], ChannelRuntime] = {}
        self._connected: set[str] = set()
        self._kv: KeyValueStore = MemoryKeyValueStore()
        self._ledger: DeliveryLedger | DisabledLedger | None = None
        self._bus: FleetBus | None = None
        self._placement: NotifierPlacement | None = None
        self._store: LedgerStore | None = None
        self._accepting = False
        self._started = False
        self._stop = anyio.Event()
        self._task_group: TaskGroup | None = None
        self._router: InboundRouter | None = None
        self.agent_sockets: AgentSockets | None = None
        self.ready = anyio.Event()
        self.url: str | None = None
        self.public_url = self.options.public_url
        api = self.config.api
        self.host = self.options.host or api.host
        self.port = api.port if self.options.port is None else self.options.port
        self.token = api.token.get_secret_value() if api.token is not None else None
        check_bind(self.host, self.token)

    # ------------------------------------------------------------------ lifecycle

    def stop(self) -> None:
        """Stop taking new work and shut down within the grace period (idempotent)."""
        self._accepting = False
        self._stop.set()

    async def __aenter__(self) -> Gateway:
        self._outer = anyio.create_task_group()
        await self._outer.__aenter__()
        self._outer.start_soon(self.run)
        await self.ready.wait()
        return self

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        self.stop()
        return await self._outer.__aexit__(*exc_info)

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Serve until ``stop()``; returns after the graceful shutdown. A gateway runs once: its
        channels, stores and sockets are built for that run (make a new ``Gateway`` to serve
        again), so a second call raises ``RuntimeError``."""
        if self._started:
            raise RuntimeError(
                "this Gateway has already run; build a new Gateway(config) to serve again"
            )
        self._started = True
        async with AsyncExitStack() as stack:
            router = await self._build(stack)
            if self.options.http:
                # bound before anything starts, so a taken port fails plainly and early; until
                # ready the API answers 503
                await self._serve_http(stack, router)
            async with anyio.create_task_group() as core:
                self._task_group = core
                for channel in self.channels.values():
                    core.start_soon(channel.sender.run)
                    if channel.notifier is not None:
                        core.start_soon(channel.notifier.run)
                assert self._ledger is not None
                report = await self._ledger.boot_sweep()
                log.info("ledger boot sweep: %s", report)
                await core.start(self._ledger.run)
                async with anyio.create_task_group() as members:
                    for channel in self.channels.values():
                        if channel.member is not None:
                            members.start_soon(channel.member.run)
                    if self._placement is not None:
                        members.start_soon(self._placement.run)
                    async with anyio.create_task_group() as hosting:
                        if self._placement is not None:
                            for channel in self.channels.values():
                                hosting.start_soon(self._host, channel)
                        async with anyio.create_task_group() as intake:
                            intake.start_soon(router.run)
                            self._accepting = True
                            self.ready.set()
                            task_status.started()
                            log.info(
                                "gateway %s serving %d channel(s)%s",
                                self.gateway_id,
                                len(self.channels),
                                f" on {self.url}" if self.url else "",
                            )
                            await self._stop.wait()
                            self._accepting = False
                            intake.cancel_scope.cancel()
                        deadline = anyio.current_time() + self.options.grace
                        log.info(
                            "stopping: finishing in-flight work (grace %.1fs)", self.options.grace
                        )
                        for channel in self.channels.values():
                            if channel.member is not None:
                                channel.member.stop()
                        if self.agent_sockets is not None:
                            with anyio.move_on_after(self.options.grace):
                                await self.agent_sockets.aclose()
                        # hosted notifiers send what they took, then end, before we leave
                        hosting.cancel_scope.deadline = deadline
                    if self._placement is not None:
                        self._placement.stop()
                    members.cancel_scope.deadline = deadline
                with anyio.move_on_after(max(0.0, deadline - anyio.current_time())):
                    # the sender offers no "became idle" event; a short poll bounds the wait
                    while not all(c.quiet for c in self.channels.values()):  # noqa: ASYNC110
                        await anyio.sleep(0.05)
                unfinished = sum(c.sender.queued for c in self.channels.values())
                if unfinished:
                    log.warning("grace period over: %d queued send(s) dropped", unfinished)
                core.cancel_scope.cancel()
        log.info("gateway %s stopped", self.gateway_id)

    # ------------------------------------------------------------------ building

    async def _build(self, stack: AsyncExitStack) -> InboundRouter:
        config = self.config
        stores = config.stores
        self._store, self._ledger = await open_ledger(
            stack,
            stores,
            options=self.options,
            deliver=self._deliver,
            profiles=config.profiles,
            connected=lambda platform: platform in self._connected_platforms(),
        )
        self._kv = provider_key_values(self._store)
        for name, profile in config.profiles.items():
            if name not in self.providers:
                self.providers[name] = make_provider(
                    name, profile, kv=self._kv, public_url=self.public_url
                )
                # the current instance (a reconnect replaces it) is closed at the end
                stack.push_async_callback(self._close_provider, name)
            self._connected.add(name)
        log_target = conversation_log_target(config)
        scale_out: ScaleOut | None = None  # with Redis, gateways share budgets and notifiers
        if stores.membership_url is not None:
            scale_out = await open_scale_out(
                stack, stores.membership_url, options=self.options, gateway_id=self.gateway_id
            )
            self._bus, self._placement = scale_out.bus, scale_out.placement
        for name, channel_config in config.channels.items():
            runtime = channel_runtime(
                name,
                channel_config,
                profile=config.profiles[channel_config.profile],
                provider=self.providers[channel_config.profile],
                budgets=scale_out.budgets if scale_out is not None else None,
                metrics=self.metrics,
                ledger=self._ledger,
                kv=self._kv,
            )
            if scale_out is None:  # else placement decides which gateway runs it (_host)
                runtime.notifier = notifier_for(runtime)
            agent = agent_for(
                name, channel_config.agent, given=self._agents, default=self.options.default_agent
            )
            if agent is not None:
                await join_agent_group(
                    stack,
                    runtime,
                    agent,
                    log_target=log_target,
                    options=self.options,
                    gateway_id=self.gateway_id,
                )
            elif channel_config.agent_group is not None:  # served by connected agents only
                await open_channel_log(stack, runtime, log_target=log_target, options=self.options)
            self.channels[name] = runtime
            self._by_platform[(channel_config.profile, channel_config.channel_id)] = runtime
        self._router = InboundRouter(
            profiles=config.profiles,
            providers=self.providers,
            given=self._given_providers,
            rebuild=self._rebuild_provider,
            channels=self.channels,
            by_platform=self._by_platform,
            connected=self._connected,
            ledger=self._ledger,
            metrics=self.metrics,
            reconnect_backoff=self.options.reconnect_backoff,
        )
        return self._router

    def _rebuild_provider(self, profile: str) -> ChatProvider:
        config = self.config.profiles[profile]
        return make_provider(profile, config, kv=self._kv, public_url=self.public_url)

    async def _close_provider(self, name: str) -> None:
        await self.providers[name].aclose()

    def _connected_platforms(self) -> set[str]:
        return {c.platform for c in self.channels.values() if c.profile in self._connected}

    # ------------------------------------------------------------------ scale-out

    async def _host(self, channel: ChannelRuntime) -> None:
        """Run ``channel``'s notifier whenever placement puts it on this gateway, until stop.

        At stop, a hosted notifier takes no new events but sends what it took before this
        gateway leaves the group, so its successor starts after it (and from its cursor).
        """
        placement, bus = self._placement, self._bus
        assert placement is not None and bus is not None
        stopping = self._stop.is_set
        while not stopping():
            await wait_until(lambda: stopping() or placement.hosts(channel.name))
            if stopping():
                return
            notifier = notifier_for(channel)
            log.info("channel %s: its notifier runs on this gateway now", channel.name)
            try:
                async with anyio.create_task_group() as tg:
                    channel.notifier = notifier
                    tg.start_soon(notifier.run)
                    following = anyio.CancelScope()  # entered by _follow
                    tg.start_soon(self._follow, channel, notifier, following)
                    await wait_until(lambda: stopping() or not placement.hosts(channel.name))
                    following.cancel()
                    if stopping():
                        await wait_until(_idle_check(notifier), poll=0.05)
                    tg.cancel_scope.cancel()
            finally:
                channel.notifier = None
            if not stopping():
                log.info("channel %s: its notifier moved to another gateway", channel.name)

    async def _follow(
        self, channel: ChannelRuntime, notifier: Notifier, scope: anyio.CancelScope
    ) -> None:
        assert self._bus is not None
        with scope:
            await self._bus.follow(channel.name, notifier.handle)

    # ------------------------------------------------------------------ inbound

    async def inbound(self, profile: str, message: InboundMessage) -> bool:
        """Hand the gateway a user message as profile ``profile``'s provider would (embedding,
        the demo): through the same dedup and bot filter as a connection's messages; True when
        it was admitted as a new turn."""
        if self._router is None:  # not running: no channel is there to take it
            return False
        return await self._router.inbound(profile, message)

    # ------------------------------------------------------------------ delivery

    async def _deliver(self, delivery: Delivery) -> MessageRef:
        channel = self._by_platform.get((delivery.profile, delivery.channel))
        if channel is None:
            raise Unreachable(
                f"no channel {delivery.channel!r} of profile {delivery.profile!r} is configured "
                "in this gateway"
            )
        if channel.replies is not None:  # a streamed reply's parts edit its partial messages
            return await channel.replies.deliver(delivery)
        op = Post(delivery.text, thread=delivery.thread, begin=delivery.begin, key=delivery.key)
        return await channel.sender.send(op, priority=Priority.TERMINAL)

    # ------------------------------------------------------------------ the API backend

    @property
    def accepting(self) -> bool:
        """Serving and taking new work (False while starting and once stopping)."""
        return self._accepting

    def _check_accepting(self) -> None:
        if self._accepting:
            return
        if self._stop.is_set():
            raise ShuttingDown()
        raise ApiError(503, "the gateway is starting (ledger boot sweep); retry in a moment")

    def channel_names(self) -> Sequence[str]:
        return list(self.channels)

    def agent_channel(self, name: str) -> ChannelRuntime | None:
        return self.channels.get(name)

    async def accept_events(self, events: Sequence[FleetEvent]) -> None:
        self._check_accepting()
        if self._bus is not None:
            await self._bus.publish(list(self.channels), events)
        kinds: Counter[str] = Counter()
        offer_here = self._bus is None
        for event in events:
            kinds["Unknown" if isinstance(event, UnknownEvent) else event.kind] += 1
            if offer_here:
                for channel in self.channels.values():
                    channel.offer(event)
        for kind, count in kinds.items():  # one labelled increment per kind, not per event
            self.metrics.events_in.labels(kind).inc(count)

    async def accept_message(self, request: MessageRequest) -> MessageReceipt:
        self._check_accepting()
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
        assert self._ledger is not None
        if self._store is not None:
            row, created = await self._store.record(reply, now=self._store.now())
        else:
            row, created = await self._ledger.record(reply), True
        self.metrics.messages_accepted.labels(channel.name).inc()
        if created and self._task_group is not None:
            self._task_group.start_soon(self._ledger.deliver_now, row)
        return MessageReceipt(obligation=row.id, duplicate=not created)

    async def health(self) -> Health:
        channels: dict[str, dict[str, Any]] = {}
        for name, channel in self.channels.items():
            sender = channel.sender
            channels[name] = {
                "healthy": sender.healthy,
                "reason": sender.health_reason,
                "profile": channel.profile,
                "paused": sender.paused_until is not None,
                "queued": sender.queued,
                "notifier_here": channel.notifier is not None,
            }
        providers = {
            name: {
                "healthy": name in self._connected,
                "provider": type(provider).__name__,
            }
            for name, provider in self.providers.items()
        }
        return Health(channels=channels, providers=providers)

    async def status(self) -> dict[str, Any]:
        return await gateway_status(self)

    async def ledger_counts(self) -> dict[str, int]:
        if self._ledger is None:
            return {}
        counts = await self._ledger.counts_by_state()
        return {State(state).value: n for state, n in counts.items()}

    async def metrics_text(self) -> bytes:
        snapshot = Snapshot(ledger_rows=await self.ledger_counts())
        for name, channel in self.channels.items():
            stats = channel.sender.stats
            snapshot.sends[name] = stats.posts
            snapshot.edits[name] = stats.edits
            snapshot.rate_limit_pauses[name] = stats.rate_limit_pauses
            snapshot.channel_healthy[name] = channel.sender.healthy
            if channel.log is not None:
                try:
                    snapshot.group_members[name] = (await channel.log.stats()).members
                except Exception as error:
                    log.warning("metrics: members of %s unavailable: %r", name, error)
        self.metrics.set_snapshot(snapshot)
        return self.metrics.render()

    # ------------------------------------------------------------------ HTTP

    async def _serve_http(self, stack: AsyncExitStack, router: InboundRouter) -> None:
        routes = [
            route
            for profile, provider in self.providers.items()
            for route in provider.http_routes(router.sink(profile))
        ]
        self.url = await serve_http_api(
            stack,
            self,
            host=self.host,
            port=self.port,
            token=self.token,
            max_body=self.config.api.max_body_bytes,
            provider_routes=routes,
            agent_socket=self._agent_socket().handle,
        )

    def _agent_socket(self) -> AgentSockets:
        api, options = self.config.api, self.options
        settings = AgentSocketSettings(
            api_token=self.token,
            agent_tokens={
                name: secret.get_secret_value() for name, secret in api.agent_tokens.items()
            },
            settle=options.settle,
            heartbeat=options.heartbeat,
            expiry=options.expiry,
            lookback=options.lookback,
            drain_timeout=options.grace,
        )
        self.agent_sockets = AgentSockets(self, settings)
        return self.agent_sockets
