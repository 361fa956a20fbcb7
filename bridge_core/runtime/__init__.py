"""The gateway process: wiring of the libraries, the HTTP API, signals, health, metrics, demo.

Embedding the gateway in another program::

    from bridge_core.config import load_config
    from bridge_core.runtime import Gateway, GatewayOptions

    config = load_config("bridge.toml")
    async with Gateway(config, options=GatewayOptions(port=0)) as gateway:
        print(gateway.url)                                # the HTTP API, when enabled
        await gateway.accept_events([parse_event({...})])  # what POST /v1/events does
        await gateway.accept_message(MessageRequest(channel="ops", text="hi"))
        await gateway.inbound("my-profile", inbound_message)  # as the provider would
    # leaving the block stops it gracefully (as SIGTERM does)

or ``await Gateway(config).run()`` until ``gateway.stop()``. ``serve(gateway, events=...,
ready_file=...)`` adds signal handling and event sources (what ``chatbridge run`` does).
An agent is ``async def agent(turn, history) -> str`` named in config as ``module:function``;
raise ``AgentBusy`` (from ``bridge_core.ownership``) at capacity.

Exception hierarchy::

    GatewayError        the gateway cannot start as configured
    AgentLoadError      an agent reference cannot be imported or is not async
    ApiError            an HTTP request refused (status, field, index)
    └── ShuttingDown    new work refused during the graceful stop (503)

Decisions: ``docs/adr/0050``..``0054``.
"""

from bridge_core.ownership import AgentBusy
from bridge_core.runtime.agents import Agent, AgentLoadError, echo_agent, load_agent
from bridge_core.runtime.gateway import Gateway, GatewayError, GatewayOptions, check_bind
from bridge_core.runtime.http_api import (
    ApiError,
    Health,
    MessageReceipt,
    MessageRequest,
    ShuttingDown,
    build_app,
)
from bridge_core.runtime.logs import configure_logging
from bridge_core.runtime.metrics import GatewayMetrics
from bridge_core.runtime.serve import serve

__all__ = [
    "Agent",
    "AgentBusy",
    "AgentLoadError",
    "ApiError",
    "Gateway",
    "GatewayError",
    "GatewayMetrics",
    "GatewayOptions",
    "Health",
    "MessageReceipt",
    "MessageRequest",
    "ShuttingDown",
    "build_app",
    "check_bind",
    "configure_logging",
    "echo_agent",
    "load_agent",
    "serve",
]
