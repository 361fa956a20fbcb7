"""Rewinding membership over a stretch of the log (used by the backends' ``read_back``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from bridge_core.conversation import Join, Leave, LogRecord

__all__ = ["rewind_members"]


def rewind_members(
    members_at_end: Mapping[str, float],
    records: Sequence[LogRecord],
    leave_since: Mapping[int, float],
) -> dict[str, float]:
    """The membership just before ``records[0]``, given the membership just after the last.

    Walking backwards, a join means the member was absent before it and a leave means it was
    present, with the ``since`` the backend kept for that leave (``leave_since[seq]``).
    """
    members = dict(members_at_end)
    for record in reversed(records):
        if isinstance(record, Join):
            members.pop(record.member, None)
        elif isinstance(record, Leave):
            members[record.member] = leave_since.get(record.seq, record.inserted_at)
    return members
