"""bridge-core: connect fleets of AI agents to the chat platforms their people use.

The vocabulary lives in ``bridge_core.provider`` (the provider contract, budgets, errors),
``bridge_core.events`` (fleet events), ``bridge_core.conversation`` (the conversation log) and
``bridge_core.text`` (escaping and chunking); this module re-exports the names a plugin needs.
"""

from importlib.metadata import PackageNotFoundError, version

from bridge_core.provider import (
    BUDGET_PRESETS,
    DISCORD_BUDGET,
    SLACK_BUDGET,
    TEAMS_BUDGET,
    Capabilities,
    ChatProvider,
    ConnectionLost,
    Forbidden,
    HttpRequest,
    HttpResponse,
    HttpRoute,
    InboundMessage,
    InboundSink,
    KeyValueStore,
    LengthUnit,
    MessageRef,
    MessageRejected,
    NotFound,
    ProviderError,
    RateLimited,
    SendBudget,
    TransportError,
    Unreachable,
    Window,
)

try:
    __version__ = version("bridge-core")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0"

__all__ = [
    "BUDGET_PRESETS",
    "DISCORD_BUDGET",
    "SLACK_BUDGET",
    "TEAMS_BUDGET",
    "Capabilities",
    "ChatProvider",
    "ConnectionLost",
    "Forbidden",
    "HttpRequest",
    "HttpResponse",
    "HttpRoute",
    "InboundMessage",
    "InboundSink",
    "KeyValueStore",
    "LengthUnit",
    "MessageRef",
    "MessageRejected",
    "NotFound",
    "ProviderError",
    "RateLimited",
    "SendBudget",
    "TransportError",
    "Unreachable",
    "Window",
    "__version__",
]
