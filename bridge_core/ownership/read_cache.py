"""A contiguous run of one channel's recent records, shared by the members of a process.

Every member of a process folds every record of the channel; without this each would query the
file for the same records after every commit. ``ReadCache`` holds every record with
``after < seq <= end``: it grows from the file reads and from this process's own commits when
they follow on directly (the writer reads the channel's previous seq inside its transaction), so
it never has a gap. Serving a prefix of what the file holds is fine (the reader reads on from
there). "Nothing newer" is answered from the cache only while this handle has been the channel's
only writer and its end was confirmed less than ``poll_interval`` ago, so another process's
write is still seen within a poll.
"""

from __future__ import annotations

import bisect

from bridge_core.conversation import LogRecord

__all__ = ["ReadCache"]

_SIZE = 5000


def _seq(record: LogRecord) -> int:
    return record.seq


class ReadCache:
    def __init__(self, poll_interval: float) -> None:
        self.poll_interval = poll_interval
        self._records: list[LogRecord] = []
        self._after: int | None = None
        self._end = 0
        self._verified_at = float("-inf")  # when _end was last known to be the log's end
        self._foreign_writes = False

    def reset(self) -> None:
        self._records, self._after = [], None

    def read(self, after_seq: int, limit: int, *, now: float) -> list[LogRecord] | None:
        """Records after ``after_seq`` from the cache; ``None`` when the file must be read
        (``now`` is the loop's clock)."""
        if self._after is None or after_seq < self._after:
            return None
        if after_seq < self._end:
            start = bisect.bisect_right(self._records, after_seq, key=_seq)
            return self._records[start : start + limit]
        if after_seq == self._end and not self._foreign_writes:
            fresh = now - self._verified_at < self.poll_interval
            return [] if fresh else None
        return None

    def fetched(
        self, after_seq: int, records: list[LogRecord], *, complete: bool, now: float
    ) -> None:
        """The file returned ``records``: every record after ``after_seq`` up to the last of
        them (and nothing after it, if ``complete``); ``now`` is the loop's clock when the read
        returned.

        They seed an empty cache. A read that started at the cached run's end, or inside the
        run (this handle's commits can extend it while the file is read), adds what lies
        beyond the end. A read that started before or beyond the run leaves it alone: the run
        is never moved, so it still ends where this handle's next commit begins, and that
        commit is not taken for another writer's (ADR 0178).
        """
        if self._after is None:
            self._records, self._after, self._end = [], after_seq, after_seq
        elif not self._after <= after_seq <= self._end:
            return
        end = self._end
        if records and records[-1].seq > end:
            self._extend(records if records[0].seq > end else [r for r in records if r.seq > end])
        if complete:
            self._verified_at = now

    def wrote(self, prev_seq: int, created: list[LogRecord], *, now: float) -> None:
        """Our commit appended ``created`` after the channel's record ``prev_seq``; ``now`` is
        the loop's clock (the writer's callback runs outside any task)."""
        if self._after is None and not created:
            return
        if self._after is None:
            self._records, self._after, self._end = [], prev_seq, prev_seq
        if prev_seq == self._end:
            self._extend(created)
            self._verified_at = now
        elif prev_seq < self._end and (not created or created[-1].seq <= self._end):
            # a read of the file found this commit (and maybe later ones) before this
            # callback ran: the run holds it already
            return
        else:
            # another handle wrote this channel in between: from now on "nothing newer" is
            # always checked against the file
            self._foreign_writes = True
            self.reset()

    def _extend(self, records: list[LogRecord]) -> None:
        if not records:
            return
        self._records.extend(records)
        self._end = records[-1].seq
        if len(self._records) > 2 * _SIZE:
            dropped = self._records[:-_SIZE]
            self._records = self._records[-_SIZE:]
            self._after = dropped[-1].seq
