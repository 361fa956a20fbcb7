"""The provider contract: what the core asks of every chat platform plugin.

Outbound, a provider posts to a conversation (channel, optional thread) and edits its own
messages; inbound, it hands the core user messages; around both it has a lifecycle
(``receive`` runs until the connection is lost, ``aclose`` releases it) so the core's reconnect
watcher can rebuild a failed instance.

Exception hierarchy::

    ProviderError                 anything a provider call can raise
    ├── RateLimited               the platform said "slow down" (retry_after: float | None)
    ├── NotFound                  the message (or thread) is gone
    ├── Forbidden                 the bot lost access to the channel
    ├── Unreachable               permanent: bot blocked, channel deleted, bad credentials
    ├── MessageRejected           the platform refused this message (too long, malformed);
    │                             the channel is fine, resending the same message cannot help
    └── TransportError            transient: network failure, 5xx, timeout
        └── ConnectionLost        an inbound connection dropped; the watcher rebuilds

``ERROR_TABLE`` says, for each class, what the notifier and the ledger do with it, so no package
invents its own reading. ``Unreachable`` is about the channel and ends it; ``MessageRejected`` is
about one message and ends only that message (ADR 0017).
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from bridge_core.errors import BridgeError

__all__ = [
    "ERROR_TABLE",
    "UNLIMITED_BUDGET",
    "Capabilities",
    "ChatProvider",
    "ConnectionLost",
    "ErrorReading",
    "Forbidden",
    "HttpRequest",
    "HttpResponse",
    "HttpRoute",
    "InboundMessage",
    "InboundSink",
    "KeyValueStore",
    "LedgerAction",
    "LengthUnit",
    "MessageRef",
    "MessageRejected",
    "NotFound",
    "RETRY_AFTER_LIMIT",
    "NotifierAction",
    "Priority",
    "ProviderError",
    "RateLimited",
    "SendBudget",
    "StreamingMode",
    "TransportError",
    "Unreachable",
    "Window",
    "post_key",
    "posting_with_key",
    "reading_for",
]


# --------------------------------------------------------------------------- priority


class Priority(enum.IntEnum):
    """The sender's priority classes, highest first (a lower value goes first). One enum for the
    notifier, the ledger's replies and the sender, which share it through the vocabulary."""

    TERMINAL = 0
    """Terminal updates (final edits, failure posts) and replies to people."""
    NEW = 1
    """New live messages and summaries."""
    UPDATE = 2
    """Intermediate edits."""


# --------------------------------------------------------------------------- errors


class ProviderError(BridgeError):
    """Base of every error a provider raises from ``post``, ``edit``, ``probe`` or ``receive``."""


RETRY_AFTER_LIMIT = 3600.0
"""The longest wait a ``RateLimited`` may ask for; past it, the wait counts as not said."""


class RateLimited(ProviderError):
    """The platform refused the call for now; ``retry_after`` seconds when it said how long.

    ``retry_after`` is a usable wait or ``None``, whatever the provider passed (ADR 0027): a value
    that is not a finite number from 0 to ``RETRY_AFTER_LIMIT`` seconds (``inf`` from a
    ``Retry-After: 1e309`` header, ``nan``, a negative or absurd number, a string) is kept as
    ``None``, so every reader falls back on its default back-off. The value as given is in
    ``retry_after_given``, for logs.
    """

    def __init__(self, message: str = "rate limited", *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after

    @property
    def retry_after(self) -> float | None:
        return self._retry_after

    @retry_after.setter
    def retry_after(self, value: object) -> None:
        self.retry_after_given = value
        self._retry_after = _usable_wait(value)

    def __repr__(self) -> str:
        return f"RateLimited({str(self)!r}, retry_after={self.retry_after!r})"


def _usable_wait(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        seconds = float(value)
    except OverflowError:  # an int past the float range
        return None
    return seconds if 0.0 <= seconds <= RETRY_AFTER_LIMIT else None  # False for nan


class NotFound(ProviderError):
    """The message (or thread) no longer exists: an edit target was deleted."""


class Forbidden(ProviderError):
    """The bot lost access to the channel; it may come back (re-checked every 5 minutes)."""


class Unreachable(ProviderError):
    """Permanent: the bot is blocked, the channel deleted, the credentials revoked."""


class MessageRejected(ProviderError):
    """The platform refused this one message (too long, empty, a malformed body), or it must not
    be resent (a Teams 500 on a post may have been delivered). The channel is fine: later
    messages go out as usual; resending this one cannot help."""


class TransportError(ProviderError):
    """Transient: a network failure, a timeout or a platform 5xx."""


class ConnectionLost(TransportError):
    """An inbound connection dropped; the reconnect watcher builds a new instance."""


class NotifierAction(enum.Enum):
    PAUSE_CHANNEL = "pause the channel for retry_after (or back off 1 s..60 s), keep collapsing"
    DROP_REF_REPOST = "drop the message ref; the next update posts one new message"
    MARK_UNHEALTHY = "mark the channel unhealthy, log once, re-check every 5 minutes"
    GIVE_UP_CHANNEL = "stop sending to the channel; log once; health shows it"
    DROP_RENDERING = (
        "drop this rendering (logged, naming channel and agent); the channel stays healthy and "
        "the next update renders again (an edited message keeps its ref)"
    )
    BACK_OFF = "back off exponentially 1 s..60 s with jitter, then render current state"


class LedgerAction(enum.Enum):
    WAIT_PENALTY = "wait out retry_after and resend in process; does not spend the resend budget"
    RESEND_AS_POST = "an edit target is gone: post the reply as a new message"
    KEEP_FOR_RECHECK = "keep the row failed; resend after the channel is healthy or at next start"
    ABANDON = "never retried: mark the row abandoned (kept, visible, not sent)"
    RESEND_SCHEDULE = "resend after 30 s, then 2 min; the third resend is left to the next start"


@dataclass(frozen=True, slots=True)
class ErrorReading:
    error: type[ProviderError]
    meaning: str
    notifier: NotifierAction
    ledger: LedgerAction


ERROR_TABLE: tuple[ErrorReading, ...] = (
    ErrorReading(
        RateLimited,
        "the platform asked us to slow down",
        NotifierAction.PAUSE_CHANNEL,
        LedgerAction.WAIT_PENALTY,
    ),
    ErrorReading(
        NotFound,
        "the message was deleted",
        NotifierAction.DROP_REF_REPOST,
        LedgerAction.RESEND_AS_POST,
    ),
    ErrorReading(
        Forbidden,
        "the bot lost access to the channel",
        NotifierAction.MARK_UNHEALTHY,
        LedgerAction.KEEP_FOR_RECHECK,
    ),
    ErrorReading(
        Unreachable,
        "permanent: blocked, deleted, revoked",
        NotifierAction.GIVE_UP_CHANNEL,
        LedgerAction.ABANDON,
    ),
    ErrorReading(
        MessageRejected,
        "this message was refused (too long, malformed) or must not be resent; the channel is fine",
        NotifierAction.DROP_RENDERING,
        LedgerAction.ABANDON,
    ),
    # TransportError stays last: reading_for falls back on it for anything unclassified.
    ErrorReading(
        TransportError,
        "transient: network, timeout, 5xx",
        NotifierAction.BACK_OFF,
        LedgerAction.RESEND_SCHEDULE,
    ),
)


def reading_for(error: BaseException) -> ErrorReading:
    """The row of ``ERROR_TABLE`` for an error; anything unclassified reads as transient.

    The first row whose class the error is an instance of wins, so a subclass row must come
    before its base's row (every row today is a direct subclass of ``ProviderError``).
    """
    for reading in ERROR_TABLE:
        if isinstance(error, reading.error):
            return reading
    return _TRANSIENT


_TRANSIENT = next(reading for reading in ERROR_TABLE if reading.error is TransportError)


# --------------------------------------------------------------------------- budgets


@dataclass(frozen=True, slots=True)
class Window:
    """At most ``limit`` sends in any ``seconds``-long sliding window."""

    limit: int
    seconds: float


@dataclass(frozen=True, slots=True)
class SendBudget:
    """A channel's send limits: a token bucket plus sliding windows, and edit spacing.

    A token bucket alone admits ``burst + rate * W`` sends in a window of ``W`` seconds (1,807 an
    hour on Teams' 7 + 0.5/s), which breaks an hourly cap; the windows bound that exactly.
    """

    burst: int
    per_second: float
    windows: tuple[Window, ...] = ()
    edit_spacing: float = 2.0

    def __post_init__(self) -> None:
        if self.burst < 1:
            raise ValueError(f"SendBudget.burst must be at least 1, got {self.burst}")
        if self.per_second <= 0:
            raise ValueError(f"SendBudget.per_second must be positive, got {self.per_second}")
        if self.edit_spacing < 0:
            raise ValueError(f"SendBudget.edit_spacing must be >= 0, got {self.edit_spacing}")
        for window in self.windows:
            if window.limit < 1 or window.seconds <= 0:
                raise ValueError(f"SendBudget window must have limit >= 1, seconds > 0: {window}")

    @classmethod
    def hourly(
        cls, *, burst: int, per_hour: int, edit_spacing: float = 2.0, extra: Sequence[Window] = ()
    ) -> SendBudget:
        """A bucket refilling at ``per_hour / 3600`` per second, capped at ``per_hour`` an hour."""
        return cls(
            burst=burst,
            per_second=per_hour / 3600.0,
            windows=(*extra, Window(per_hour, 3600.0)),
            edit_spacing=edit_spacing,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "burst": self.burst,
            "per_second": self.per_second,
            "windows": [{"limit": w.limit, "seconds": w.seconds} for w in self.windows],
            "edit_spacing": self.edit_spacing,
        }


# The one preset the core offers: no pacing at all (the console, tests). The platforms' presets
# live in their plugins, which register them through the ``register_budget_presets`` hook.
UNLIMITED_BUDGET = SendBudget(burst=1_000_000, per_second=1_000_000.0, edit_spacing=0.0)


# --------------------------------------------------------------------------- capabilities


class LengthUnit(enum.Enum):
    """What a platform counts when it limits a message's length."""

    CHARACTERS = "characters"  # Unicode code points
    UTF16 = "utf16"  # UTF-16 code units (JavaScript string length)
    BYTES = "bytes"  # UTF-8 bytes of the payload
    # Bytes of the text as a JSON string with ASCII-only escapes (Python's json.dumps default, as
    # msrest sends it): "\x1b" is 6 (\u001b), "é" 6, an emoji 12 (a surrogate pair), '"' 2.
    JSON_ASCII = "json_ascii"
    # Bytes of the text as a JSON string written as UTF-8 (json.dumps with ensure_ascii=False, as
    # aiohttp clients send it): "\x1b" is 6 (\u001b), '"' 2, "é" 2, an emoji 4.
    JSON_UTF8 = "json_utf8"


class StreamingMode(enum.Enum):
    """How a provider shows a reply while an agent is still writing it (ADR 0090)."""

    EDIT = "edit"
    """One message, edited in place as the text grows (the default where edits exist)."""
    NATIVE = "native"
    """The platform's own streaming calls (``stream_start`` / ``stream_append`` /
    ``stream_stop``), each paced by the channel's sender like an edit."""
    NONE = "none"
    """Nothing until the end: the final text is posted once (platforms without edits)."""


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a platform can do. ``streaming``: how a reply shows while it is written
    (``streaming_mode`` resolves it: ``EDIT`` by default, ``NONE`` without ``edit``)."""

    edit: bool
    max_length: int
    length_unit: LengthUnit = LengthUnit.CHARACTERS
    threads: bool = False
    inbound: bool = False
    probe: bool = False
    streaming: StreamingMode | None = None

    @property
    def streaming_mode(self) -> StreamingMode:
        """``streaming`` as declared, else ``EDIT``; always ``NONE`` without ``edit`` (a streamed
        reply ends with an edit of its message, so a copy with ``edit=False`` streams nothing)."""
        if not self.edit:
            return StreamingMode.NONE
        return self.streaming if self.streaming is not None else StreamingMode.EDIT

    def to_json(self) -> dict[str, Any]:
        return {
            "edit": self.edit,
            "max_length": self.max_length,
            "length_unit": self.length_unit.value,
            "threads": self.threads,
            "inbound": self.inbound,
            "probe": self.probe,
            "streaming": self.streaming_mode.value,
        }


# --------------------------------------------------------------------------- messages


@dataclass(frozen=True, slots=True)
class MessageRef:
    """A posted message, enough to edit it later. ``message_id`` is the platform's id."""

    channel: str
    message_id: str
    thread: str | None = None


@dataclass(frozen=True, slots=True)
class InboundMessage:
    """A message a person (or a bot) wrote in a channel, as a provider hands it to the core.

    ``message_id`` is the platform's stable id: replays of one message carry the same id.
    ``at`` is the platform's timestamp in epoch seconds.
    """

    message_id: str
    channel: str
    author: str
    text: str
    at: float
    thread: str | None = None
    author_is_bot: bool = False
    platform: str = ""
    profile: str = ""
    extra: dict[str, Any] = field(default_factory=dict, compare=False)


InboundSink = Callable[[InboundMessage], Awaitable[None]]
"""Where a provider hands inbound messages; the core's dedup and admission sit behind it."""


@dataclass(frozen=True, slots=True)
class HttpRequest:
    """A framework-neutral HTTP request handed to a provider's inbound route."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    query: dict[str, str] = field(default_factory=dict)

    def header(self, name: str) -> str | None:
        lowered = name.lower()
        for key, value in self.headers.items():
            if key.lower() == lowered:
                return value
        return None


@dataclass(frozen=True, slots=True)
class HttpResponse:
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "application/json"


@dataclass(frozen=True, slots=True)
class HttpRoute:
    """A route a provider contributes to the gateway's HTTP server (Slack Events, Teams)."""

    method: str
    path: str
    handler: Callable[[HttpRequest], Awaitable[HttpResponse]]


@runtime_checkable
class KeyValueStore(Protocol):
    """A small persistent store the core lends providers (kept beside the ledger)."""

    async def get(self, namespace: str, key: str) -> bytes | None: ...

    async def put(self, namespace: str, key: str, value: bytes) -> None: ...

    async def delete(self, namespace: str, key: str) -> None: ...


# --------------------------------------------------------------------------- idempotent creates

_POST_KEY: ContextVar[str | None] = ContextVar("bridge_core_post_key", default=None)


def post_key() -> str | None:
    """The idempotency key of the ``post`` being made, or ``None`` when the post has none.

    The core sets it around ``ChatProvider.post`` for the parts of a ledger reply: one key per
    obligation and part, the same on every resend of that part, in this process or the next.
    A provider whose platform takes a client-chosen id for creates (Matrix's transaction id)
    derives that id from it, so a resend after a crash returns the first message instead of
    posting a second (ADR 0080).
    """
    return _POST_KEY.get()


@contextmanager
def posting_with_key(key: str | None) -> Iterator[None]:
    """Make ``key`` the ``post_key()`` of the posts made inside the block (the sender's job)."""
    token = _POST_KEY.set(key)
    try:
        yield
    finally:
        _POST_KEY.reset(token)


# --------------------------------------------------------------------------- the contract


class ChatProvider:
    """Base class of every provider instance (one per bot profile).

    Subclasses implement ``post`` and, with edit support, ``edit``; they override ``probe`` when
    the platform has a cheap way to tell whether the bot can still post to a channel, ``receive``
    when they take inbound messages over a connection, and ``http_routes`` when inbound arrives
    over HTTP. Every method raises only ``ProviderError`` subclasses.
    """

    name: str = "provider"
    capabilities: Capabilities = Capabilities(edit=False, max_length=4000)

    async def post(self, channel: str, text: str, *, thread: str | None = None) -> MessageRef:
        raise NotImplementedError

    async def edit(self, ref: MessageRef, text: str) -> MessageRef:
        raise Unreachable(f"provider {self.name!r} cannot edit messages (capabilities.edit=False)")

    async def stream_start(
        self, channel: str, text: str, *, thread: str | None = None
    ) -> MessageRef:
        """``StreamingMode.NATIVE``: open a streamed message showing ``text``."""
        raise Unreachable(f"provider {self.name!r} has no native streaming (capabilities)")

    async def stream_append(self, ref: MessageRef, text: str) -> MessageRef:
        """``StreamingMode.NATIVE``: append ``text`` (a delta) to the streamed message."""
        raise Unreachable(f"provider {self.name!r} has no native streaming (capabilities)")

    async def stream_stop(self, ref: MessageRef, text: str) -> MessageRef:
        """``StreamingMode.NATIVE``: append ``text`` (may be empty) and end the stream; the
        message is an ordinary, finished message afterwards."""
        raise Unreachable(f"provider {self.name!r} has no native streaming (capabilities)")

    async def probe(self, channel: str) -> bool | None:
        """Whether the bot can post to ``channel``; ``None`` when the provider cannot tell cheaply
        (the sender then re-checks with a real send)."""
        return None

    async def receive(self, sink: InboundSink) -> None:
        """Deliver inbound messages to ``sink`` until cancelled; raise ``ConnectionLost`` when the
        connection drops (the watcher rebuilds) or ``Unreachable`` when it never will work.
        Providers without a connection return at once."""
        return None

    def http_routes(self, sink: InboundSink) -> Sequence[HttpRoute]:
        """Routes served on the gateway's HTTP server that feed ``sink``."""
        return ()

    def escape(self, text: str) -> str:
        """Neutralise mass pings and markup in agent-controlled text for this platform."""
        return text

    async def aclose(self) -> None:
        return None

    async def __aenter__(self) -> ChatProvider:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
