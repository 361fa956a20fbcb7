"""The conversation log's vocabulary: turns, agent frames, membership records.

Each channel has one totally ordered log. A ``Turn`` is a user message admitted into it; a
``Frame`` is an agent's answer recorded in the same log (before it is sent, together with its
ledger row); ``Join`` and ``Leave`` are membership records. ``seq`` is the position in the log
and ``inserted_at`` the commit time the log assigned (never a member's clock), in epoch seconds.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = [
    "Frame",
    "Join",
    "Leave",
    "LeaveReason",
    "LogRecord",
    "Turn",
    "conversation_id",
    "obligation_id",
]


def conversation_id(channel: str, *, thread: str | None, author: str) -> str:
    """A conversation is a thread, or one person's top-level messages in a channel."""
    if thread:
        return f"{channel}/t/{thread}"
    return f"{channel}/u/{author}"


def obligation_id(profile: str, channel: str, answers: str, index: int = 0) -> str:
    """The ledger's id for reply ``index`` answering inbound message or turn ``answers``.

    Derived, not random: two gateways answering the same turn record the same obligation, so a
    shared ledger delivers one reply.
    """
    return f"{len(profile)}:{profile}|{len(channel)}:{channel}|{len(answers)}:{answers}|{index}"


@dataclass(frozen=True, slots=True)
class Turn:
    channel: str
    conversation: str
    seq: int
    inserted_at: float
    message_id: str
    author: str
    text: str
    thread: str | None = None


@dataclass(frozen=True, slots=True)
class Frame:
    """An answer to the turn at ``answers_seq``, recorded by ``member``."""

    channel: str
    conversation: str
    seq: int
    inserted_at: float
    answers_seq: int
    member: str
    obligation: str


@dataclass(frozen=True, slots=True)
class Join:
    channel: str
    seq: int
    inserted_at: float
    member: str
    since: float  # the member is eligible for turns with inserted_at >= since


class LeaveReason(enum.Enum):
    GRACEFUL = "graceful"
    EXPIRED = "expired"


@dataclass(frozen=True, slots=True)
class Leave:
    channel: str
    seq: int
    inserted_at: float
    member: str
    reason: LeaveReason


LogRecord = Turn | Frame | Join | Leave
