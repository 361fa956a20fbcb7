"""The last turns and frames of each conversation a fold has seen: an agent's history, read
without a round trip to the log.

A member that folds alone keeps its own; members of one handle share their share's (ADR 0146).
It is bounded twice, as the view is: ``history_limit`` records a conversation, and
``max_conversations`` conversations, the least recently active dropped first.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Sequence

from bridge_core.conversation import Frame, LogRecord, Turn

__all__ = ["RecentHistory"]


class RecentHistory:
    """Each conversation's last ``history_limit`` turns and frames, oldest first."""

    __slots__ = ("_kept", "history_limit", "max_conversations")

    def __init__(self, *, history_limit: int, max_conversations: int) -> None:
        self.history_limit = history_limit
        self.max_conversations = max_conversations
        self._kept: OrderedDict[str, deque[Turn | Frame]] = OrderedDict()

    def remember(self, records: Sequence[LogRecord]) -> None:
        """Keep the turns and frames of ``records``, folded in log order."""
        recent = self._kept
        for record in records:
            if isinstance(record, Turn | Frame):
                kept = recent.get(record.conversation)
                if kept is None:
                    kept = recent[record.conversation] = deque(maxlen=self.history_limit)
                    if len(recent) > self.max_conversations:
                        recent.popitem(last=False)
                else:
                    recent.move_to_end(record.conversation)
                kept.append(record)

    def get(self, conversation: str) -> deque[Turn | Frame] | None:
        """What is kept of ``conversation`` (not a copy), or None."""
        return self._kept.get(conversation)

    def clear(self) -> None:
        self._kept.clear()
