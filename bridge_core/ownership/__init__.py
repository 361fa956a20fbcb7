"""Agent groups: each conversation of a channel answered by exactly one member (seed ADR-0069).

A channel's **conversation log** (``ConversationLog``) is one totally ordered log of user turns,
agent frames and membership records; its time (``inserted_at``, ``since``, heartbeats) is the
log's, never a member's. Backends: ``open_conversation_log(target, channel=...)`` with

- a filesystem path or ``sqlite:///path`` — embedded SQLite (tables ``log_*``, beside the ledger
  in the same file; one writer with group commits; WAL; members are tasks in one process);
- ``redis://host:port/db`` — a Redis stream per channel, Lua scripts for admission (with its
  dedup key), joins, leaves, heartbeats (server ``TIME``) and the reaper; no leader;
- ``memory://`` — in-process (a fresh store), for tests and embedding.

The runtime's calls::

    log = await open_conversation_log("/var/lib/bridge/bridge.db", channel="C123")
    turn = await log.admit(inbound_message)        # Turn, or None for a duplicate / a bot
    member = AgentGroupMember(
        log, member_id="gw-a",                      # a random suffix is added per join
        settle=1.0, heartbeat=1.0, expiry=3.0,      # expiry defaults to 3 x heartbeat
        lookback=3600.0,                            # how far back a joiner looks for turns
        drain_timeout=10.0, max_concurrent=64,
        on_turn=answer,                             # async (turn, history) -> None
        on_busy=send_busy_notice,                   # async (turn, AgentBusy) -> None
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(member.run)                   # joins, follows, heartbeats, leaves
        ...
        member.stop()                               # drain in-flight turns, leave gracefully

    async def answer(turn, history):                # one conversation's turns in log order
        reply = ...                                 # raise AgentBusy when at capacity
        obligation = obligation_id(profile, turn.channel, turn.message_id)
        ...                                         # record the ledger row (ADR 0051), then
        await member.record_frame(turn, obligation)  # (= log.record_frame(turn, id, ...))
        ...                                         # then send

    await log.recent_history(conversation, 20)      # turns and frames, oldest first
    await log.statistics()        # LogStatistics(members, turns_admitted, turns_answered)
    member.statistics(), member.view.statistics()   # per-member counters
    member.ready, member.current_id, member.delivering, member.view.members

The decision logic is ``GroupView`` (pure, no I/O) and ``hashing`` (rendezvous over xxh3_64).
``docs/adr/0030``..``0036`` record the decisions and what a Redis failover can lose.

Exception hierarchy::

    OwnershipError            anything this package raises on purpose
    ├── LogUnavailable        the backend did not answer (transient)
    ├── NotAMember            a member acted after its leave (or expiry) record was appended
    └── AgentBusy             raised by an agent handler at capacity; the member relays a notice
"""

from bridge_core.ownership.hashing import member_seed, owner_of, score
from bridge_core.ownership.log import (
    DEFAULT_RETENTION,
    DEFAULT_SEEN_TTL,
    AgentBusy,
    Backlog,
    ConversationLog,
    JoinResult,
    LogStatistics,
    LogUnavailable,
    NotAMember,
    OwnershipError,
)
from bridge_core.ownership.member import (
    AgentGroupMember,
    BusyHandler,
    MemberStatistics,
    TurnHandler,
)
from bridge_core.ownership.memory_log import MemoryConversationLog, MemoryLogStore
from bridge_core.ownership.open import open_conversation_log
from bridge_core.ownership.view import DEFAULT_MAX_CONVERSATIONS, GroupView, ViewStatistics

__all__ = [
    "DEFAULT_MAX_CONVERSATIONS",
    "DEFAULT_RETENTION",
    "DEFAULT_SEEN_TTL",
    "AgentBusy",
    "AgentGroupMember",
    "Backlog",
    "BusyHandler",
    "ConversationLog",
    "GroupView",
    "JoinResult",
    "LogStatistics",
    "LogUnavailable",
    "MemberStatistics",
    "MemoryConversationLog",
    "MemoryLogStore",
    "NotAMember",
    "OwnershipError",
    "TurnHandler",
    "ViewStatistics",
    "member_seed",
    "open_conversation_log",
    "owner_of",
    "score",
]
