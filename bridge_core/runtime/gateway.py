"""The gateway: one process serving every configured channel.

``Gateway(config).run()`` (or ``async with Gateway(config) as gw``) builds a provider per bot
profile, a ``ChannelSender`` per channel, the delivery ledger (its boot sweep runs before anything
is served), per channel the notifier and an agent group member handing owned turns to the
configured agent, and the HTTP API; then serves until ``stop()``. This module starts, connects
and stops the parts; the others each hold one of them:

- ``assembly``: building the parts from the config, in order (with ``builders``);
- ``inbound_router``: every user message's one path, through dedup and the bot filter, into its
  channel's log, and the providers' connections kept up;
- ``api_backend``: what the HTTP API and the agent socket do (``gateway.api``);
- ``hosting``: a channel's notifier run here while scale-out placement puts it here;
- ``lifecycle``: the one run's stage (starting, serving, stopping).

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
from collections.abc import Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from functools import partial
from typing import Any

import anyio
from anyio.abc import TaskGroup, TaskStatus

from bridge_core.config import BridgeConfig
from bridge_core.events import FleetEvent
from bridge_core.provider import ChatProvider, InboundMessage
from bridge_core.runtime.agent_socket import AgentSockets, AgentSocketSettings
from bridge_core.runtime.agents import Agent
from bridge_core.runtime.api_backend import GatewayApi
from bridge_core.runtime.assembly import Assembly, assemble
from bridge_core.runtime.builders import make_provider, serve_http_api
from bridge_core.runtime.channel import ChannelRuntime
from bridge_core.runtime.hosting import host_notifier
from bridge_core.runtime.http_api import MessageReceipt, MessageRequest
from bridge_core.runtime.inbound_router import InboundRouter
from bridge_core.runtime.lifecycle import Lifecycle
from bridge_core.runtime.metrics import GatewayMetrics
from bridge_core.runtime.options import GatewayError, GatewayOptions, check_bind

__all__ = ["Gateway", "GatewayError", "GatewayOptions", "check_bind"]

log = logging.getLogger("bridge_core.runtime")


@dataclass(frozen=True, slots=True)
class _Running:
    """What one run assembled, whole: its parts, the inbound router and the API backend."""

    parts: Assembly
    router: InboundRouter
    api: GatewayApi


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
        # filled when the run assembles its parts; a reconnect replaces a profile's provider
        self.channels: dict[str, ChannelRuntime] = {}
        self.providers: dict[str, ChatProvider] = dict(providers or {})
        self._given_providers = frozenset(self.providers)
        self._agents = dict(agents or {})
        self._connected: set[str] = set()
        self._lifecycle = Lifecycle()
        self._running: _Running | None = None  # the run's parts, once assembled
        self.agent_sockets: AgentSockets | None = None  # with the HTTP API only
        self.ready = anyio.Event()
        self.url: str | None = None
        self.public_url = self.options.public_url
        api = self.config.api
        self.host = self.options.host or api.host
        self.port = api.port if self.options.port is None else self.options.port
        self.token = api.token.get_secret_value() if api.token is not None else None
        check_bind(self.host, self.token)

    # ------------------------------------------------------------------ embedding

    @property
    def accepting(self) -> bool:
        """Serving and taking new work (False while starting and once stopping)."""
        return self._lifecycle.accepting

    @property
    def api(self) -> GatewayApi:
        """What the HTTP API serves (health, status, metrics, ...), once the run has assembled
        its parts (by ``ready``)."""
        if self._running is None:
            raise RuntimeError("the gateway has not assembled its parts yet; await gateway.ready")
        return self._running.api

    async def accept_events(self, events: Sequence[FleetEvent]) -> None:
        """What ``POST /v1/events`` does: every event accepted, or ``ApiError``."""
        await self._assembled().api.accept_events(events)

    async def accept_message(self, request: MessageRequest) -> MessageReceipt:
        """What ``POST /v1/messages`` does: the reply recorded in the ledger, then sent."""
        return await self._assembled().api.accept_message(request)

    async def inbound(self, profile: str, message: InboundMessage) -> bool:
        """Hand the gateway a user message as profile ``profile``'s provider would (embedding,
        the demo): through the same dedup and bot filter as a connection's messages; True when
        it was admitted as a new turn."""
        if self._running is None:  # not running: no channel is there to take it
            return False
        return await self._running.router.inbound(profile, message)

    async def ledger_counts(self) -> dict[str, int]:
        """The ledger's rows by state (empty before the run assembled its ledger)."""
        if self._running is None:
            return {}
        return await self._running.api.ledger_counts()

    def _assembled(self) -> _Running:
        if self._running is None:  # nothing takes work before the parts exist
            raise self._lifecycle.refusal()
        return self._running

    # ------------------------------------------------------------------ lifecycle

    def stop(self) -> None:
        """Stop taking new work and shut down within the grace period (idempotent)."""
        self._lifecycle.stop()

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
        self._lifecycle.begin()
        async with AsyncExitStack() as stack:
            run = await self._assemble(stack)
            if self.options.http:
                # bound before anything starts, so a taken port fails plainly and early; until
                # ready the API answers 503
                await self._serve_http(stack, run)
            async with anyio.create_task_group() as core:
                for channel in self.channels.values():
                    core.start_soon(channel.sender.run)
                    if channel.notifier is not None:
                        core.start_soon(channel.notifier.run)
                report = await run.parts.ledger.boot_sweep()
                log.info("ledger boot sweep: %s", report)
                await core.start(run.parts.ledger.run)
                deadline = await self._serve_members(run, core, task_status)
                await self._let_senders_finish(deadline)
                core.cancel_scope.cancel()
        log.info("gateway %s stopped", self.gateway_id)

    async def _assemble(self, stack: AsyncExitStack) -> _Running:
        parts = await assemble(
            stack,
            self.config,
            options=self.options,
            gateway_id=self.gateway_id,
            metrics=self.metrics,
            agents=self._agents,
            providers=self.providers,
            channels=self.channels,
            connected=self._connected,
        )

        def rebuild(profile: str) -> ChatProvider:
            config = self.config.profiles[profile]
            return make_provider(profile, config, kv=parts.kv, public_url=self.public_url)

        router = InboundRouter(
            profiles=self.config.profiles,
            providers=self.providers,
            given=self._given_providers,
            rebuild=rebuild,
            channels=self.channels,
            by_platform=parts.by_platform,
            connected=self._connected,
            ledger=parts.ledger,
            metrics=self.metrics,
            reconnect_backoff=self.options.reconnect_backoff,
        )
        api = GatewayApi(
            parts,
            gateway_id=self.gateway_id,
            channels=self.channels,
            providers=self.providers,
            connected=self._connected,
            metrics=self.metrics,
            lifecycle=self._lifecycle,
        )
        self._running = _Running(parts=parts, router=router, api=api)
        return self._running

    # ------------------------------------------------------------------ serving, then stopping

    async def _serve_members(
        self, run: _Running, core: TaskGroup, task_status: TaskStatus[None]
    ) -> float:
        """Run the channels' agent group members (and, scaled out, the notifier placement)
        until stop; they get until the returned grace deadline to finish their turns."""
        scale_out = run.parts.scale_out
        async with anyio.create_task_group() as members:
            for channel in self.channels.values():
                if channel.member is not None:
                    members.start_soon(channel.member.run)
            if scale_out is not None:
                members.start_soon(scale_out.placement.run)
            deadline = await self._serve_hosted(run, core, task_status)
            if scale_out is not None:
                scale_out.placement.stop()
            members.cancel_scope.deadline = deadline
        return deadline

    async def _serve_hosted(
        self, run: _Running, core: TaskGroup, task_status: TaskStatus[None]
    ) -> float:
        """Host the notifiers placement puts here (scaled out) and take work until stop; then
        the members stop and the hosted notifiers send what they took, by the grace deadline."""
        scale_out = run.parts.scale_out
        stopping = self._lifecycle.stopped.is_set
        async with anyio.create_task_group() as hosting:
            if scale_out is not None:
                for channel in self.channels.values():
                    hosting.start_soon(
                        partial(
                            host_notifier,
                            channel,
                            placement=scale_out.placement,
                            bus=scale_out.bus,
                            stopping=stopping,
                        )
                    )
            await self._take_work_until_stopped(run, core, task_status)
            deadline = anyio.current_time() + self.options.grace
            log.info("stopping: finishing in-flight work (grace %.1fs)", self.options.grace)
            for channel in self.channels.values():
                if channel.member is not None:
                    channel.member.stop()
                if channel.notifier is not None:
                    channel.notifier.end_holds()  # no spawn can join them now
            if self.agent_sockets is not None:
                with anyio.move_on_after(self.options.grace):
                    await self.agent_sockets.aclose()
            # hosted notifiers send what they took, then end, before we leave
            hosting.cancel_scope.deadline = deadline
        return deadline

    async def _take_work_until_stopped(
        self, run: _Running, core: TaskGroup, task_status: TaskStatus[None]
    ) -> None:
        """Take inbound messages, events and messages until ``stop()``."""
        async with anyio.create_task_group() as intake:
            intake.start_soon(run.router.run)
            self._lifecycle.serve(core)
            self.ready.set()
            task_status.started()
            log.info(
                "gateway %s serving %d channel(s)%s",
                self.gateway_id,
                len(self.channels),
                f" on {self.url}" if self.url else "",
            )
            await self._lifecycle.stopped.wait()
            intake.cancel_scope.cancel()

    async def _let_senders_finish(self, deadline: float) -> None:
        """Wait until every channel is quiet or ``deadline``; what is left stays in the ledger."""
        with anyio.move_on_after(max(0.0, deadline - anyio.current_time())):
            # the sender offers no "became idle" event; a short poll bounds the wait
            while not all(c.quiet for c in self.channels.values()):  # noqa: ASYNC110
                await anyio.sleep(0.05)
        unfinished = sum(c.sender.queued for c in self.channels.values())
        if unfinished:
            log.warning("grace period over: %d queued send(s) dropped", unfinished)

    # ------------------------------------------------------------------ HTTP

    async def _serve_http(self, stack: AsyncExitStack, run: _Running) -> None:
        routes = [
            route
            for profile, provider in self.providers.items()
            for route in provider.http_routes(run.router.sink(profile))
        ]
        self.agent_sockets = AgentSockets(run.api, self._agent_socket_settings())
        self.url = run.api.url = await serve_http_api(
            stack,
            run.api,
            host=self.host,
            port=self.port,
            token=self.token,
            max_body=self.config.api.max_body_bytes,
            provider_routes=routes,
            agent_socket=self.agent_sockets.handle,
        )

    def _agent_socket_settings(self) -> AgentSocketSettings:
        api, options = self.config.api, self.options
        return AgentSocketSettings(
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
