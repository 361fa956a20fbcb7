"""The agent socket's messages built from the gateway's records, and read back for an error.

``turn_message``: the ``turn`` message for one of a member's turns, with its history.
``re_of``: the ``id`` an ``error`` answering a frame echoes as ``re``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import bridge_core.agent.protocol as p
from bridge_core.conversation import Frame, Turn

__all__ = ["re_of", "turn_message"]


def re_of(message: p.ClientMessage | None, raw: str) -> str | None:
    """The ``re`` of the ``error`` answering the frame ``raw``: the ``id`` of ``message``, read
    from it; when the parser refused the frame (``message`` is ``None``), its ``id`` if it is an
    object with a valid one (``protocol.echoable_id``), so a message refused for another field,
    or for its size, is still named. An invalid ``id`` is never echoed: its error names it."""
    if message is not None:
        return message.id
    # the key is written "id" or with escapes ("\\u0069d"): without either, there is none
    if '"id"' not in raw and "\\u" not in raw:
        return None
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return p.echoable_id(data.get("id")) if isinstance(data, dict) else None


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
