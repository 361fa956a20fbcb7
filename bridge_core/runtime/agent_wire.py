"""The agent socket's messages built from the gateway's records, and read back for an error.

``turn_message``: the ``turn`` message for one of a member's turns, with its history.
``re_of``: the ``id`` of a message that failed, so its ``error`` can name it (``re``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import bridge_core.agent.protocol as p
from bridge_core.conversation import Frame, Turn

__all__ = ["re_of", "turn_message"]


def re_of(raw: str) -> str | None:
    """The ``id`` of a message that failed, when it has a usable one (to correlate the error)."""
    if '"id"' not in raw:
        return None
    try:
        value = json.loads(raw).get("id")
    except (ValueError, AttributeError, RecursionError):
        return None
    return value if isinstance(value, str) and len(value) <= p.MAX_NAME_CHARS else None


def turn_message(
    turn_id: str, channel: str, turn: Turn, history: Sequence[Turn | Frame]
) -> p.TurnMessage:
    entries = tuple(
        p.HistoryEntry(kind="turn", seq=record.seq, author=record.author, text=record.text)
        if isinstance(record, Turn)
        else p.HistoryEntry(kind="frame", seq=record.seq, answers_seq=record.answers_seq)
        for record in history
    )
    return p.TurnMessage(
        turn=turn_id,
        channel=channel,
        conversation=turn.conversation,
        seq=turn.seq,
        inserted_at=turn.inserted_at,
        message_id=turn.message_id,
        author=turn.author,
        text=turn.text,
        thread=turn.thread,
        history=entries,
    )
