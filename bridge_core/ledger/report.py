"""What a sweep of the ledger did: ``SweepReport``, the counts every sweep returns."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SweepReport"]


@dataclass(frozen=True, slots=True)
class SweepReport:
    """What one sweep did: rows claimed and sent, and how they ended."""

    claimed: int = 0
    delivered: int = 0
    failed: int = 0
    abandoned: int = 0
    marked: int = 0
    skipped: int = 0

    def __str__(self) -> str:
        # For log lines: "nothing to send", or only the counts that are not zero.
        counts = [
            f"{value} {name}"
            for name, value in (
                ("delivered", self.delivered),
                ("failed", self.failed),
                ("abandoned", self.abandoned),
                ("marked", self.marked),
                ("skipped", self.skipped),
            )
            if value
        ]
        if not self.claimed and not counts:
            return "nothing to send"
        return f"{self.claimed} claimed" + (f": {', '.join(counts)}" if counts else "")

    def __add__(self, other: SweepReport) -> SweepReport:
        return SweepReport(
            self.claimed + other.claimed,
            self.delivered + other.delivered,
            self.failed + other.failed,
            self.abandoned + other.abandoned,
            self.marked + other.marked,
            self.skipped + other.skipped,
        )
