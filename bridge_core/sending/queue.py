"""The sender's queue: work by priority class, keyed work replaced in place, writes spaced.

One dict per ``Priority`` class, in insertion order, so the head of the highest non-empty class
goes next. Keyed work (the notifier's) is supersedable: work submitted under a key still queued
takes the queued one's place in line instead of queueing behind it, so the queue is bounded by
keys, not by submissions. Work is eligible once ``edit_spacing`` has passed since the last write
to its message (an edit) or since its key's last refusal or ``NotFound`` (a keyed post), so one
message is never written faster than the budget's spacing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field

import anyio

from bridge_core.provider import MessageRef, Priority, ProviderError
from bridge_core.sending.ops import Edit, SendOp

__all__ = ["Outcome", "OutcomeCallback", "Work", "WorkQueue"]

Outcome = MessageRef | ProviderError | None
OutcomeCallback = Callable[[Outcome], None]

_PRUNE_AT = 4096  # spacing only needs writes younger than edit_spacing; prune in batches


@dataclass(eq=False, slots=True)
class Work:
    """One operation waiting in a sender, and what became of it."""

    key: Hashable
    op: SendOp
    priority: int
    on_outcome: OutcomeCallback | None = None
    keyed: bool = True
    waiter: anyio.Event | None = None
    result: Outcome = None
    begin_error: Exception | None = None  # raised by the op's ``begin``: nothing was sent
    done: bool = False
    abandoned: bool = False  # its ``send()`` caller stopped waiting: never sent again
    strikes: int = 0  # transport failures with other work delivered since its previous one
    delivered_mark: int | None = None  # the sender's deliveries at its latest transport failure
    target: str | None = field(default=None)  # the message an edit writes to


class WorkQueue:
    """Queued work of one channel by priority class, with the spacing of writes to a message."""

    def __init__(self, *, edit_spacing: float) -> None:
        self._edit_spacing = edit_spacing
        self._classes: list[dict[Hashable, Work]] = [{} for _ in Priority]
        self._last_write: dict[str, float] = {}  # message id -> time of its last write
        self._last_rejected: dict[Hashable, float] = {}  # keyed work: key -> time of refusal

    def __len__(self) -> int:
        return sum(len(queued) for queued in self._classes)

    def __iter__(self) -> Iterator[Work]:
        """Every queued work, highest class first, in line order."""
        for queued in self._classes:
            yield from list(queued.values())

    def put(self, work: Work) -> Work | None:
        """Queue ``work``; the keyed work of its key it replaced in place, if any."""
        if isinstance(work.op, Edit):
            work.target = work.op.ref.message_id
        replaced: Work | None = None
        if work.keyed:
            for queued in self._classes:
                replaced = queued.get(work.key)
                if replaced is not None:
                    if replaced.priority != work.priority:
                        del queued[work.key]
                    break
        # Assigning an existing key keeps its place in line: replaced in place, not re-queued.
        self._classes[work.priority][work.key] = work
        return replaced

    def put_back(self, work: Work, *, head: bool = True) -> bool:
        """Put keyed work back at the head (or the tail) of its class; False when newer work of
        its key waits (the older work is then superseded, not queued)."""
        if any(work.key in queued for queued in self._classes):
            return False
        if not head:
            self._classes[work.priority][work.key] = work
            return True
        rebuilt = {work.key: work}
        rebuilt.update(self._classes[work.priority])
        self._classes[work.priority] = rebuilt
        return True

    def is_queued(self, work: Work) -> bool:
        """Whether ``work`` itself (not a replacement of its key) is still in line."""
        return self._classes[work.priority].get(work.key) is work

    def remove(self, work: Work) -> None:
        """Take ``work``'s key out of its class, if it is there."""
        self._classes[work.priority].pop(work.key, None)

    def withdraw(self, key: Hashable) -> Work | None:
        """Take the queued work of ``key`` out of line, whatever its class."""
        for queued in self._classes:
            work = queued.pop(key, None)
            if work is not None:
                return work
        return None

    def take_unkeyed(self) -> list[Work]:
        """Take every unkeyed work (``send()`` callers) out of line."""
        taken = []
        for queued in self._classes:
            for key in [key for key, work in queued.items() if not work.keyed]:
                taken.append(queued.pop(key))
        return taken

    def take_all(self) -> list[Work]:
        """Empty the queue; what was in it, highest class first."""
        taken = list(self)
        for queued in self._classes:
            queued.clear()
        return taken

    def pick(self, now: float) -> tuple[Work | None, float]:
        """The first eligible work in priority order, else when the earliest becomes eligible."""
        earliest = math.inf
        for queued in self._classes:
            for work in queued.values():
                not_before = self._not_before(work)
                if not_before <= now:
                    return work, now
                earliest = min(earliest, not_before)
        return None, earliest

    def wrote(self, message_id: str, now: float) -> None:
        """A write to ``message_id`` at ``now``: its next edit waits for the spacing."""
        self._last_write[message_id] = now
        self._prune(now)

    def refused(self, key: Hashable, now: float) -> None:
        """A keyed post of ``key`` was refused at ``now``: its next one is spaced like an edit, so
        a submitter whose every rendering is refused cannot spin the channel (ADR 0017)."""
        self._last_rejected[key] = now
        self._prune(now)

    def _not_before(self, work: Work) -> float:
        if work.target is not None:
            last = self._last_write.get(work.target)
        elif work.keyed:
            last = self._last_rejected.get(work.key)
        else:
            return -math.inf
        return -math.inf if last is None else last + self._edit_spacing

    def _prune(self, now: float) -> None:
        horizon = now - self._edit_spacing
        if len(self._last_write) > _PRUNE_AT:
            self._last_write = {m: t for m, t in self._last_write.items() if t > horizon}
        if len(self._last_rejected) > _PRUNE_AT:
            self._last_rejected = {k: t for k, t in self._last_rejected.items() if t > horizon}
