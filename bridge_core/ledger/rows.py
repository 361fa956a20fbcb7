"""The row layout the SQL stores share: columns, and converting a result row to an Obligation."""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from typing import Any

from bridge_core.ledger.model import Obligation, Reply, State
from bridge_core.provider import MessageRef

__all__ = [
    "COLUMNS",
    "INSERT_COLUMNS",
    "claimed_row",
    "decode_chunks",
    "decode_parts",
    "decode_refs",
    "encode_chunks",
    "encode_refs",
    "filters_sql",
    "held_row",
    "in_page_order",
    "new_row",
    "scope_where",
    "to_obligation",
]

COLUMNS = (
    "id, profile, platform, channel, thread, reply_to, text, chunks, state, attempts, resends, "
    "fence, owner, created_at, updated_at, next_attempt_at, last_error, penalty, delivered"
)


def encode_chunks(text: str, chunks: Sequence[str], partials: Sequence[MessageRef] = ()) -> str:
    """The ``chunks`` column: the parts, and a streamed reply's partial messages with them.

    A one-part reply (the common case) stores no second copy of its text. A streamed reply's
    partial refs travel in the same column, as ``{"chunks": [...], "partials": [...]}``, so
    every store keeps them without a schema change (ADR 0090).
    """
    if partials:
        return json.dumps(
            {"chunks": list(chunks), "partials": json.loads(encode_refs(partials))},
            ensure_ascii=False,
        )
    if len(chunks) == 1 and chunks[0] == text:
        return ""
    return json.dumps(list(chunks), ensure_ascii=False)


def decode_chunks(text: str, stored: str) -> tuple[str, ...]:
    return decode_parts(text, stored)[0]


def decode_parts(text: str, stored: str) -> tuple[tuple[str, ...], tuple[MessageRef, ...]]:
    """``encode_chunks`` read back: the parts and the partial refs."""
    if not stored:
        return (text,), ()
    data = json.loads(stored)
    if isinstance(data, dict):
        return tuple(data["chunks"]), decode_refs(data["partials"])
    return tuple(data), ()


def encode_refs(refs: Sequence[MessageRef]) -> str:
    return json.dumps(
        [[ref.channel, ref.message_id, ref.thread] for ref in refs], ensure_ascii=False
    )


def decode_refs(stored: str | list[Any]) -> tuple[MessageRef, ...]:
    if not stored:
        return ()
    items = json.loads(stored) if isinstance(stored, str) else stored
    return tuple(MessageRef(channel, message_id, thread) for channel, message_id, thread in items)


def to_obligation(row: Sequence[Any]) -> Obligation:
    """The ``Obligation`` a row of ``COLUMNS`` holds. Both stores give the columns back as
    their declared types (SQLite by its ``INTEGER`` and ``REAL`` column affinities, PostgreSQL by
    psycopg's loaders), so no column is converted: a boot sweep decodes every row it sends
    through this, and the conversions were a third of the largest single holder of the GIL in
    the SQLite sweep (ADRs 0170, 0172). Positional: keywords cost a third more a row."""
    (
        id_,
        profile,
        platform,
        channel,
        thread,
        reply_to,
        text,
        chunks,
        state,
        attempts,
        resends,
        fence,
        owner,
        created_at,
        updated_at,
        next_attempt_at,
        last_error,
        penalty,
        delivered,
    ) = row
    try:
        known = _STATES[state]
    except KeyError:
        known = State(state)  # the error for an unknown one
    if chunks:
        parts, partials = decode_parts(text, chunks)
    else:  # a one-part reply with nothing delivered yet: most rows a sweep reads
        parts, partials = (text,), ()
    return Obligation(
        id_,
        profile,
        platform,
        channel,
        thread,
        reply_to,
        text,
        parts,
        known,
        attempts,
        resends,
        fence,
        owner,
        created_at,
        updated_at,
        next_attempt_at,
        last_error,
        True if penalty else False,  # a jump, not a call of bool()
        decode_refs(delivered) if delivered else (),
        partials,
    )


_STATES = {state.value: state for state in State}
_PENDING, _ATTEMPTING = State.PENDING, State.ATTEMPTING
_OPEN_VALUES = frozenset({State.PENDING.value, State.ATTEMPTING.value, State.FAILED.value})
_OPEN_LITERAL = "('pending', 'attempting', 'failed')"


def scope_where(
    scope: Any,
    *,
    now: float,
    me: str,
    dead_sql: str,
    dead_params: Sequence[Any],
    ph: str,
    open_sql: str = f"state IN {_OPEN_LITERAL}",
) -> tuple[str, list[Any]]:
    """``WHERE ... ORDER BY ... LIMIT ...`` for a ``Scope``, with ``ph`` as the placeholder.

    ``dead_sql`` is the store's own "this row's owner is dead" predicate; ``open_sql``, the
    condition of its partial index of open rows, as that index states it.
    """

    def marks(count: int) -> str:
        return ", ".join([ph] * count)

    params: list[Any] = []
    states = [state.value for state in scope.states]
    profiles = sorted(scope.profiles)
    if not set(states) <= _OPEN_VALUES:
        raise ValueError(f"a sweep scope holds only open states, got {states}")
    # The literal term lets the planner use the partial index of open rows and read them in
    # order: bound parameters alone cannot prove the index's condition, and a sweep would scan
    # and sort every row for every page.
    clauses = [
        f"({open_sql})",
        f"state IN ({marks(len(states))})",
        f"profile IN ({marks(len(profiles))})",
    ]
    params += states
    params += profiles
    if scope.platforms is not None:
        platforms = sorted(scope.platforms)
        if not platforms:
            clauses.append("1 = 0")
        else:
            clauses.append(f"platform IN ({marks(len(platforms))})")
            params += platforms
    if scope.owners == "mine":
        clauses.append(f"owner = {ph}")
        params.append(me)
    elif scope.owners == "dead":
        clauses.append(f"({dead_sql})")
        params += dead_params
    else:
        clauses.append(f"(owner = {ph} OR {dead_sql})")
        params.append(me)
        params += dead_params
    if scope.due == "due":
        clauses.append(f"(next_attempt_at IS NOT NULL AND next_attempt_at <= {ph})")
    elif scope.due == "due_or_unset":
        clauses.append(f"(next_attempt_at IS NULL OR next_attempt_at <= {ph})")
    else:
        clauses.append(f"(NOT penalty OR next_attempt_at <= {ph})")
    params.append(now)
    if scope.after is not None:
        # A row value, so the index seeks to the cursor instead of scanning up to it.
        clauses.append(f"(created_at, id) > ({ph}, {ph})")
        params += [scope.after[0], scope.after[1]]
    params.append(scope.limit)
    return " AND ".join(clauses) + f" ORDER BY created_at, id LIMIT {ph}", params


def in_page_order(rows: Sequence[Obligation]) -> bool:
    """Whether ``rows`` are in the order ``scope_where`` asks for: ``(created_at, id)``,
    ascending (Python orders floats and strings as SQLite does REALs and BINARY texts)."""
    last: tuple[float, str] | None = None
    for row in rows:
        key = (row.created_at, row.id)
        if last is not None and key < last:
            return False
        last = key
    return True


def filters_sql(
    states: Collection[State] | None,
    channel: str | None,
    created_before: float | None,
    created_after: float | None,
    *,
    ph: str,
) -> tuple[str, list[object]]:
    """`` WHERE ...`` for people's row filters (empty when there is none)."""
    clauses: list[str] = []
    params: list[object] = []
    if states is not None:
        values = sorted(state.value for state in states)
        clauses.append(f"state IN ({', '.join([ph] * len(values))})" if values else "1 = 0")
        params += values
    if channel is not None:
        clauses.append(f"channel = {ph}")
        params.append(channel)
    if created_before is not None:
        clauses.append(f"created_at < {ph}")
        params.append(created_before)
    if created_after is not None:
        clauses.append(f"created_at > {ph}")
        params.append(created_after)
    return ((" WHERE " + " AND ".join(clauses)) if clauses else ""), params


INSERT_COLUMNS = (
    "id, profile, platform, channel, thread, reply_to, text, chunks, owner, created_at, "
    "updated_at, state, fence, attempts"
)
"""The columns a new row's ``INSERT`` names, in the order of ``insert_params``."""


def insert_params(row: Obligation, *, owner: str | None) -> tuple[Any, ...]:
    """The values of a new row, in the order of ``INSERT_COLUMNS``."""
    return (
        row.id,
        row.profile,
        row.platform,
        row.channel,
        row.thread,
        row.reply_to,
        row.text,
        encode_chunks(row.text, row.chunks, row.partials),
        owner,
        row.created_at,
        row.updated_at,
        row.state.value,
        row.fence,
        row.attempts,
    )


def new_row(reply: Reply, *, owner: str | None, now: float, claimed: bool = False) -> Obligation:
    """The row ``record`` creates for ``reply``: ``pending``, or with ``claimed`` as its first
    claim by ``owner`` leaves it (``attempting``, fence 1, one attempt; ADR 0121). Positional,
    as ``claimed_row``: built once a reply, and eighteen keywords cost a third of the call
    (ADR 0170)."""
    return Obligation(
        reply.obligation_id,  # id
        reply.profile,
        reply.platform,
        reply.channel,
        reply.thread,
        reply.reply_to,
        reply.text,
        reply.chunks,
        _ATTEMPTING if claimed else _PENDING,  # state
        1 if claimed else 0,  # attempts
        0,  # resends
        1 if claimed else 0,  # fence
        owner,
        now,  # created_at
        now,  # updated_at
        None,  # next_attempt_at
        None,  # last_error
        False,  # penalty
        (),  # delivered
        reply.partials,
    )


def held_row(
    row: Obligation,
    state: State,
    penalty: bool,
    next_attempt_at: float | None,
    updated_at: float,
    last_error: str | None,
    delivered: tuple[MessageRef, ...],
) -> Obligation:
    """``row`` (as its holder claimed it) with what a held update (a part's progress, a settle,
    a proof of the claim) changes: its owner, fence, attempts and resends stay. Positional, as
    ``claimed_row``: built once a settle, and the keywords of a generic change cost a third
    more (ADR 0170)."""
    return Obligation(
        row.id,
        row.profile,
        row.platform,
        row.channel,
        row.thread,
        row.reply_to,
        row.text,
        row.chunks,
        state,
        row.attempts,
        row.resends,
        row.fence,
        row.owner,
        row.created_at,
        updated_at,
        next_attempt_at,
        last_error,
        penalty,
        delivered,
        row.partials,
    )


def claimed_row(row: Obligation, fence: int, owner: str | None, now: float) -> Obligation:
    """``row`` as read (at ``fence``) with a claim's changes, as the claim statements of both
    stores make them. Positional: a sweep builds one a row, and keywords cost twice as much."""
    return Obligation(
        row.id,
        row.profile,
        row.platform,
        row.channel,
        row.thread,
        row.reply_to,
        row.text,
        row.chunks,
        State.ATTEMPTING,
        row.attempts + 1,
        row.resends + (row.attempts > 0 and not row.penalty),
        fence + 1,
        owner,
        row.created_at,
        now,  # updated_at
        None,  # next_attempt_at
        row.last_error,
        False,  # penalty
        row.delivered,
        row.partials,
    )
