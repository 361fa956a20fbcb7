"""An independent checker of a channel's transcript: the budget over every window, edit spacing.

It re-derives everything from the transcript the console provider writes (one JSON object per
line with ``t``, ``op``, ``channel``, ``message_id``) and shares no code with the sender, so a
bug in the sender's pacing cannot hide itself. Every attempt the platform saw counts: ``post``,
``edit`` and ``error`` lines alike.

- ``check_budget`` replays the token bucket and checks every sliding window;
- ``check_edit_spacing`` checks that writes to one message are at least the spacing apart;
- ``assert_paced`` raises ``AssertionError`` listing every violation;
- ``max_in_window`` gives the largest number of sends in any window of a length (the largest
  burst, the peak hourly rate).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bridge_core.provider import SendBudget

__all__ = [
    "TOLERANCE",
    "TranscriptEntry",
    "Violation",
    "assert_paced",
    "check_budget",
    "check_edit_spacing",
    "max_in_window",
    "read_transcript",
]

TOLERANCE = 1e-5  # the console rounds ``t`` to microseconds


@dataclass(frozen=True, slots=True)
class TranscriptEntry:
    t: float
    op: str  # post | edit | error
    channel: str
    message_id: str | None
    text: str
    error: str | None = None
    failed_op: str | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TranscriptEntry:
        return cls(
            t=float(data["t"]),
            op=str(data["op"]),
            channel=str(data["channel"]),
            message_id=data.get("message_id"),
            text=str(data.get("text") or ""),
            error=data.get("error"),
            failed_op=data.get("failed_op"),
        )


@dataclass(frozen=True, slots=True)
class Violation:
    rule: str
    at: float
    detail: str

    def __str__(self) -> str:
        return f"t={self.at:.6f}: {self.rule}: {self.detail}"


def read_transcript(path: Path | str) -> list[TranscriptEntry]:
    """The entries of a console transcript file, in file order.

    A record cut short by a kill (the console starts the next run on a fresh line) is skipped:
    it never ends with ``}``, and every whole record does.
    """
    entries = []
    with Path(path).open(encoding="utf-8") as file:
        for line in file:
            line = line.strip()
            if line.endswith("}"):
                entries.append(TranscriptEntry.from_json(json.loads(line)))
    return entries


def _times(entries: Iterable[TranscriptEntry], channel: str | None) -> list[float]:
    return sorted(e.t for e in entries if channel is None or e.channel == channel)


def check_budget(
    entries: Sequence[TranscriptEntry],
    budget: SendBudget,
    *,
    channel: str | None = None,
    tolerance: float = TOLERANCE,
) -> list[Violation]:
    """Every way the attempts to ``channel`` (all channels when None) broke ``budget``."""
    times = _times(entries, channel)
    violations: list[Violation] = []
    tokens = float(budget.burst)
    last: float | None = None
    for t in times:
        if last is not None:
            tokens = min(float(budget.burst), tokens + (t - last) * budget.per_second)
        last = t
        tokens -= 1.0
        if tokens < -tolerance * max(1.0, budget.per_second):
            violations.append(
                Violation("token bucket", t, f"overdrawn to {tokens:.4f} tokens ({budget})")
            )
    for window in budget.windows:
        for i in range(window.limit, len(times)):
            span = times[i] - times[i - window.limit]
            if span < window.seconds - tolerance:
                violations.append(
                    Violation(
                        f"window {window.limit}/{window.seconds:g}s",
                        times[i],
                        f"{window.limit + 1} sends within {span:.6f} s "
                        f"(from t={times[i - window.limit]:.6f})",
                    )
                )
    return violations


def check_edit_spacing(
    entries: Sequence[TranscriptEntry], spacing: float, *, tolerance: float = TOLERANCE
) -> list[Violation]:
    """Every pair of consecutive writes to one message closer than ``spacing`` seconds."""
    last: dict[str, float] = {}
    violations: list[Violation] = []
    for entry in sorted(entries, key=lambda e: e.t):
        if entry.message_id is None:
            continue
        previous = last.get(entry.message_id)
        if previous is not None and entry.t - previous < spacing - tolerance:
            violations.append(
                Violation(
                    "edit spacing",
                    entry.t,
                    f"message {entry.message_id} written {entry.t - previous:.6f} s after the "
                    f"previous write (spacing {spacing:g} s)",
                )
            )
        last[entry.message_id] = entry.t
    return violations


def assert_paced(
    entries: Sequence[TranscriptEntry], budget: SendBudget, *, channel: str | None = None
) -> None:
    """Raise ``AssertionError`` naming every budget and spacing violation in ``entries``."""
    scoped = [e for e in entries if channel is None or e.channel == channel]
    violations = check_budget(scoped, budget) + check_edit_spacing(scoped, budget.edit_spacing)
    if violations:
        shown = "\n".join(str(v) for v in violations[:20])
        more = f"\n... and {len(violations) - 20} more" if len(violations) > 20 else ""
        raise AssertionError(f"{len(violations)} pacing violation(s):\n{shown}{more}")


def max_in_window(times: Sequence[float], seconds: float, *, tolerance: float = TOLERANCE) -> int:
    """The most sends in any half-open window ``[a, a + seconds)`` (times need not be sorted).

    Like ``check_budget``, two sends ``seconds - tolerance`` apart count as a window apart (the
    console rounds ``t`` to microseconds).
    """
    ordered = sorted(times)
    best = 0
    start = 0
    for end, t in enumerate(ordered):
        while ordered[start] <= t - seconds + tolerance:
            start += 1
        best = max(best, end - start + 1)
    return best
