"""The SQLite conversation log's writes, as data: each is a small object run on the writer's
connection (``op(tx)``, or with its neighbours of one kind, ``type(op).many(tx, ops)``).

They hold values only, never the log handle: what a write does is read here, apart from the
handle's group commit (``sqlite_commit``), and the clock is the transaction's (``LogTx.wall``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from bridge_core.conversation import Frame, Join, Leave, LeaveReason, Turn
from bridge_core.ownership.log import JoinResult
from bridge_core.ownership.sqlite_commit import LogTx

__all__ = ["Admission", "Answer", "Heartbeat", "JoinGroup", "LeaveGroup", "Reap"]

_IDS_PER_STATEMENT = 500  # well under SQLite's 32,766 variables
_TURN_COLUMNS = ("conversation", "message_id", "author", "body", "thread")
_FRAME_COLUMNS = ("conversation", "answers_seq", "member", "obligation")


@lru_cache(maxsize=16)
def _seen_sql(ids: int) -> str:
    """Record ``ids`` message ids as seen (channel ``?1``, time ``?2``); an id seen before is
    left as it is (the statement's row count tells how many were new)."""
    values = ", ".join(f"(?1, ?{3 + i}, ?2)" for i in range(ids))
    return f"INSERT OR IGNORE INTO log_seen (channel, message_id, seen_at) VALUES {values}"


class _SeenBefore(Exception):
    """A merged run of admissions met an id seen before (see ``Admission.many``)."""


@dataclass(slots=True, eq=False, kw_only=True)
class Admission:
    """One admission: the dedup check of ``log_seen`` and the append of its turn, in the same
    transaction; concurrent admissions of one commit run together (``many``), in its order.
    ``prune``: ``(seen_ttl, retention)`` when this admission first prunes ids and records older
    than those (every ``prune_every`` admissions), else ``None``."""

    message_id: str
    author: str
    text: str
    thread: str | None
    conversation: str
    prune: tuple[float, float] | None

    def __call__(self, tx: LogTx) -> Turn | None:
        return self.many(tx, [self])[0]

    @staticmethod
    def many(tx: LogTx, ops: Sequence[Admission]) -> list[Turn | None]:
        """Admit each of ``ops`` in order: a message id already seen, in the log or earlier in
        ``ops``, gives ``None``; every other gets its turn. Three statements for the lot (the
        check and record of the ids, the turns, the counters).

        A run that meets an id the log has seen raises ``_SeenBefore``: the batch is then
        committed the careful way, one admission at a time, where a single id's row count
        says whether it is new (replays are rare; a merged batch of fresh ids is the rule).
        """
        conn, channel = tx.conn, tx.channel
        now = tx.now()
        prune = next((op.prune for op in ops if op.prune is not None), None)
        if prune is not None:
            seen_ttl, retention = prune
            conn.execute("DELETE FROM log_seen WHERE seen_at < ?", (now - seen_ttl,))
            conn.execute(
                "DELETE FROM log_records WHERE channel = ? AND inserted_at < ?",
                (channel, now - retention),
            )
            tx.pruned = True
        ids = [op.message_id for op in ops]
        # the dedup check and the record of the ids in one statement: under the write lock
        # nobody else inserts, so the ids are all new exactly when it inserted one row for
        # each distinct id (a repeat in ``ops`` conflicts with its first sighting)
        inserted = 0
        for start in range(0, len(ids), _IDS_PER_STATEMENT):
            asked = ids[start : start + _IDS_PER_STATEMENT]
            inserted += conn.execute(_seen_sql(len(asked)), (channel, now, *asked)).rowcount
        if inserted == 0 and len(ops) == 1:
            return [None]
        if inserted != len(set(ids)):
            # some id was seen before: which one is told admission by admission, on the
            # careful path (one savepoint each), where this batch is sent again
            raise _SeenBefore
        out: list[Turn | None] = [None] * len(ops)
        fresh: list[int] = []  # indexes into ops of the first sighting of each id
        rows: list[tuple[Any, ...]] = []
        taken: set[str] = set()
        for index, op in enumerate(ops):
            if op.message_id not in taken:
                taken.add(op.message_id)
                fresh.append(index)
                rows.append((op.conversation, op.message_id, op.author, op.text, op.thread))
        stamped = tx.insert_many("turn", _TURN_COLUMNS, rows)
        created = tx.created
        for index, (seq, at), row in zip(fresh, stamped, rows, strict=True):
            turn = Turn(channel, row[0], seq, at, row[1], row[2], row[3], row[4])
            out[index] = turn
            created.append(turn)
        tx.count("admitted", len(rows))
        return out


@dataclass(slots=True, eq=False)
class Answer:
    """One frame (a member's answer to a turn); concurrent frames of one commit are appended
    together (``many``), in its order."""

    turn: Turn
    member: str
    obligation: str

    def __call__(self, tx: LogTx) -> Frame:
        return self.many(tx, [self])[0]

    @staticmethod
    def many(tx: LogTx, ops: Sequence[Answer]) -> list[Frame]:
        rows = [(op.turn.conversation, op.turn.seq, op.member, op.obligation) for op in ops]
        out = []
        for row, (seq, at) in zip(rows, tx.insert_many("frame", _FRAME_COLUMNS, rows), strict=True):
            out.append(Frame(tx.channel, row[0], seq, at, row[1], row[2], row[3]))
        tx.created += out
        tx.count("answered", len(out))
        return out


@dataclass(slots=True, eq=False)
class JoinGroup:
    """A member joins (its ``since`` is ``settle`` seconds on): the members before it come back
    with its join record."""

    member: str
    settle: float

    def __call__(self, tx: LogTx) -> JoinResult:
        before = dict(
            tx.conn.execute(
                "SELECT member, since FROM log_members WHERE channel = ?", (tx.channel,)
            ).fetchall()
        )
        at = tx.now()
        since = at + self.settle
        seq, _ = tx.insert("join", at=at, member=self.member, since=since)
        tx.conn.execute(
            "INSERT OR REPLACE INTO log_members (channel, member, since, beat_at) "
            "VALUES (?, ?, ?, ?)",
            (tx.channel, self.member, since, at),
        )
        join = Join(tx.channel, seq, at, self.member, since)
        tx.created.append(join)
        return JoinResult(join, before)


def _remove(tx: LogTx, member: str, since: float, reason: LeaveReason) -> Leave:
    tx.conn.execute(
        "DELETE FROM log_members WHERE channel = ? AND member = ?", (tx.channel, member)
    )
    seq, at = tx.insert("leave", member=member, since=since, reason=reason.value)
    leave = Leave(tx.channel, seq, at, member, reason)
    tx.created.append(leave)
    return leave


@dataclass(slots=True, eq=False)
class LeaveGroup:
    """A member leaves gracefully: its leave record, or ``None`` if it was not a member."""

    member: str

    def __call__(self, tx: LogTx) -> Leave | None:
        row = tx.conn.execute(
            "SELECT since FROM log_members WHERE channel = ? AND member = ?",
            (tx.channel, self.member),
        ).fetchone()
        if row is None:
            return None
        return _remove(tx, self.member, row[0], LeaveReason.GRACEFUL)


@dataclass(slots=True, eq=False)
class Heartbeat:
    """A member's heartbeat: whether it is still a member."""

    member: str

    def __call__(self, tx: LogTx) -> bool:
        cursor = tx.conn.execute(
            "UPDATE log_members SET beat_at = ? WHERE channel = ? AND member = ?",
            (tx.wall(), tx.channel, self.member),
        )
        return cursor.rowcount == 1


@dataclass(slots=True, eq=False)
class Reap:
    """Expire the members whose last heartbeat is older than ``expiry`` seconds."""

    expiry: float

    def __call__(self, tx: LogTx) -> list[Leave]:
        rows = tx.conn.execute(
            "SELECT member, since FROM log_members WHERE channel = ? AND beat_at < ? "
            "ORDER BY member",
            (tx.channel, tx.wall() - self.expiry),
        ).fetchall()
        return [_remove(tx, member, since, LeaveReason.EXPIRED) for member, since in rows]
