"""bridge-core: connect fleets of AI agents to the chat platforms their people use.

The vocabulary lives in ``bridge_core.provider`` (the provider contract, budgets, errors),
``bridge_core.events`` (fleet events), ``bridge_core.conversation`` (the conversation log) and
``bridge_core.text`` (escaping, chunking, making text valid); this module re-exports the names a
plugin needs, so a provider plugin imports ``bridge_core`` (and ``bridge_core.testing`` in its
tests) and nothing below it, as an llm plugin imports ``llm.hookimpl`` (a test in
``tests/foundation/test_import_boundaries.py`` holds every plugin in ``plugins/`` to that).
"""

from importlib.metadata import PackageNotFoundError, version

from bridge_core.errors import BridgeError
from bridge_core.hookspecs import ProviderContext, ProviderSettings, ProviderType, hookimpl
from bridge_core.platform_errors import ErrorCode, ErrorCodeTable, mapped_call
from bridge_core.provider import (
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
    StreamingMode,
    TransportError,
    Unreachable,
    Window,
    post_key,
    posting_with_key,
)
from bridge_core.read_back import ChannelPositions, JsonRows
from bridge_core.retry_after import MAX_RETRY_AFTER, parse_retry_after, retry_after_header
from bridge_core.text import (
    chunk,
    find_invalid_text,
    json_may_hold_invalid_text,
    measure,
    neutralise_mass_mentions,
    prepare,
    valid_json,
    valid_text,
)

try:
    __version__ = version("bridge-core")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0"

__all__ = [
    "BridgeError",
    "MAX_RETRY_AFTER",
    "Capabilities",
    "ChannelPositions",
    "JsonRows",
    "ChatProvider",
    "ConnectionLost",
    "ErrorCode",
    "ErrorCodeTable",
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
    "ProviderContext",
    "ProviderError",
    "ProviderSettings",
    "ProviderType",
    "RateLimited",
    "SendBudget",
    "StreamingMode",
    "TransportError",
    "Unreachable",
    "Window",
    "post_key",
    "posting_with_key",
    "__version__",
    "chunk",
    "find_invalid_text",
    "json_may_hold_invalid_text",
    "hookimpl",
    "mapped_call",
    "measure",
    "neutralise_mass_mentions",
    "prepare",
    "valid_json",
    "valid_text",
    "parse_retry_after",
    "retry_after_header",
]
