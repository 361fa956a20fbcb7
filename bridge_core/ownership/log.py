"""The conversation log protocol every backend implements, and how to open one.

Exception hierarchy::

    OwnershipError            anything this package raises on purpose
    ├── LogUnavailable        the backend did not answer (transient: retry, stop delivering)
    ├── NotAMember            a member acted after its leave (or expiry) record was appended
    └── AgentBusy             raised by an agent handler at capacity; the member relays a notice
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from bridge_core.conversation import Frame, Join, Leave, LogRecord, Turn
from bridge_core.errors import BridgeError
from bridge_core.provider import InboundMessage

__all__ = [
    "AgentBusy",
    "Backlog",
    "ConversationLog",
    "JoinResult",
    "LogStatistics",
    "LogUnavailable",
    "NotAMember",
    "OwnershipError",
    "DEFAULT_RETENTION",
    "DEFAULT_SEEN_TTL",
]

DEFAULT_SEEN_TTL = 24 * 3600.0
"""How long an admitted message id is remembered durably (a replay older than this is a new
turn). A day outlasts every platform's redelivery (Slack's last retry comes about 5 minutes
after the first; a Discord resume replays only the minutes a connection was down)."""

DEFAULT_RETENTION = 7 * 24 * 3600.0
"""How long the embedded log keeps turns and frames (the Redis log is capped by length)."""


class OwnershipError(BridgeError):
    """Base of the errors this package raises."""


class LogUnavailable(OwnershipError):
    """The log's backend did not answer; the call may be retried."""


class NotAMember(OwnershipError):
    """The member was removed from the group (its leave or expiry is in the log).

    A member that comes back must join again under a new id, with a new settle delay.
    """


class AgentBusy(Exception):
    """Raise from an ``on_turn`` handler at capacity: the end user gets a short busy notice.

    A signal, not an error: it is not a ``BridgeError``, so no ``except BridgeError`` takes it.
    """

    def __init__(self, message: str = "the agent is busy", *, notice: str | None = None) -> None:
        super().__init__(message)
        self.notice = notice


@dataclass(frozen=True, slots=True)
class JoinResult:
    """A member's join record and the membership just before it (member id to ``since``)."""

    join: Join
    members_before: Mapping[str, float]


@dataclass(frozen=True, slots=True)
class Backlog:
    """Records before a point of the log, and the membership just before the first of them."""

    members_at_start: Mapping[str, float]
    records: Sequence[LogRecord]


@dataclass(frozen=True, slots=True)
class LogStatistics:
    members: int
    turns_admitted: int
    turns_answered: int


@runtime_checkable
class ConversationLog(Protocol):
    """One channel's totally ordered log of turns, frames, joins and leaves.

    Times (``inserted_at``, ``since``, heartbeats) come from the log (the SQLite writer's clock
    under its write lock, the Redis server's clock), never from a member.
    """

    channel: str

    async def admit(self, message: InboundMessage) -> Turn | None:
        """Append a user turn for ``message``; ``None`` if its id was admitted before (by any
        process), or if a bot wrote it. The dedup check and the append are one atomic step."""
        ...

    async def record_frame(self, turn: Turn, member: str, obligation: str) -> Frame:
        """Append an agent frame answering ``turn`` (call it before sending the answer)."""
        ...

    async def join(self, member: str, *, settle: float) -> JoinResult:
        """Append ``member``'s join with ``since = commit time + settle``."""
        ...

    async def leave(self, member: str) -> Leave | None:
        """Append a graceful leave; ``None`` if the member had already left or expired."""
        ...

    async def heartbeat(self, member: str) -> bool:
        """Stamp ``member``'s heartbeat with the log's clock; ``False`` once it was removed."""
        ...

    async def reap(self, *, expiry: float) -> list[Leave]:
        """Append an expired leave, exactly once, for each member silent for ``expiry`` seconds."""
        ...

    async def read(
        self, *, after_seq: int, limit: int = 1000, wait: float = 0.0
    ) -> list[LogRecord]:
        """Records after ``after_seq`` in log order; waits up to ``wait`` s when there are none."""
        ...

    async def read_back(
        self, *, before_seq: int, members: Mapping[str, float], not_before: float
    ) -> Backlog:
        """Records before ``before_seq`` committed at or after ``not_before``, with the
        membership just before the first of them (``members`` is the membership at
        ``before_seq``)."""
        ...

    async def recent_history(
        self, conversation: str, limit: int = 20, *, up_to_seq: int | None = None
    ) -> list[Turn | Frame]:
        """The last ``limit`` turns and frames of ``conversation`` (up to ``up_to_seq``)."""
        ...

    async def statistics(self) -> LogStatistics: ...

    async def aclose(self) -> None: ...
