"""Kill real gateway-shaped processes with SIGKILL and check what reached the "platform".

Used by ``test_crash.py`` (a few dozen kills) and ``soak.py`` (hundreds); the runs on a shared
PostgreSQL ledger are ``crash_postgres.py``'s. The checks, over the delivery file the children
append to:

1. every recorded reply (every part) that was not scripted to fail for good reached the platform
   at least once, unless its resend budget was provably spent by kills and scripted failures;
2. every extra copy of a part carries the recovery marker (at most one unmarked copy);
3. no copy carries the marker unless that reply had been in flight before (an earlier ``start``
   line, or a snapshot after a kill showed it ``attempting``);
4. nothing is sent after the row was abandoned;
5. (shared ledger) no claim (reply, fence) was used by two processes, and a reply passes from
   one process to another only after the first was killed (or frozen past its lease);
6. (counted, for the freeze test) sends started under a claim that another process had already
   superseded: only a process frozen between its claim and its send can make one;
7. (counted, for the paced sender) marked copies of a reply that no send had started before,
   split by whether a ``claimed`` line (the child's ``--sender`` mode writes one when a claim
   returns) shows that its claim had completed: such a reply was claimed and then waited without
   its request leaving (the claim came before its budget slot), where a kill during the claim's
   own commit is the moment ADR 0020 says the ledger cannot tell from a send in flight.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import crash_zygote

from bridge_core.testing.processes import children_of, wait_ended

CHILD = Path(__file__).with_name("crash_child.py")
Child = subprocess.Popen[bytes] | crash_zygote.ForkedChild
MAX_RESENDS = 3


@dataclass
class Kill:
    phase: str
    states: dict[str, int]
    attempting: set[str]
    at: float
    pid: int


@dataclass
class Report:
    kills: list[Kill] = field(default_factory=list)
    replies: int = 0
    copies: int = 0
    marked: int = 0
    abandoned: int = 0
    budget_spent: int = 0
    drains: int = 0
    marked_unstarted: int = 0  # marked copies of a reply that no send had started before
    claims_lost: int = 0  # replies a process found taken by another when their turn came
    stale_sends: int = 0  # sends under a claim another process had already superseded
    claimed_unsent: int = 0  # of marked_unstarted: the claim had returned, no request followed

    @property
    def kills_while_queued(self) -> int:
        """Kills that left replies recorded but not yet claimed (waiting for their turn)."""
        return sum(1 for kill in self.kills if kill.states.get("pending"))

    @property
    def kills_while_attempting(self) -> int:
        return sum(1 for kill in self.kills if kill.attempting)

    @property
    def kills_during_boot(self) -> int:
        return sum(1 for kill in self.kills if kill.phase == "boot")

    def summary(self) -> str:
        lines = [
            f"{len(self.kills)} kills: {self.kills_while_attempting} with rows attempting, "
            f"{self.kills_during_boot} during a boot sweep; {self.replies} replies, "
            f"{self.copies} copies sent, {self.marked} marked "
            f"({self.marked_unstarted} claimed but never started, {self.claimed_unsent} of them "
            f"after their claim had returned), {self.abandoned} abandoned "
            f"({self.budget_spent} by a budget spent on kills), {self.claims_lost} claims lost "
            f"at the turn, {self.stale_sends} stale sends, {self.drains} drain runs",
        ]
        for number, kill in enumerate(self.kills, 1):
            states = " ".join(f"{k}={v}" for k, v in sorted(kill.states.items()) if v)
            lines.append(f"  kill {number:3d} pid {kill.pid} in {kill.phase:5s}: {states}")
        return "\n".join(lines)


def start_child(
    ledger: str, out: Path, phase: Path, *, mode: str, first: int = 0, extra: tuple[str, ...] = ()
) -> Child:
    """A child serving (or draining) ``ledger``: forked from the pre-imported zygote
    (``crash_zygote.py``), or with ``--skew`` a fresh interpreter, whose clock must be shifted
    before anything is imported."""
    phase.write_text("")
    argv = [
        "--ledger",
        ledger,
        "--out",
        str(out),
        "--phase",
        str(phase),
        "--mode",
        mode,
        "--first",
        str(first),
        *extra,
    ]
    if "--skew" not in extra:
        return crash_zygote.spawn(argv, phase.with_suffix(".err"))
    return subprocess.Popen(
        [sys.executable, str(CHILD), *argv], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )


def wait_phase(child: Child, phase: Path, wanted: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if child.poll() is not None:
            return False
        try:
            if phase.read_text() == wanted:
                return True
        except OSError:
            pass
        time.sleep(0.0005)
    return False


def sigkill(child: Child) -> None:
    """Kill ``child`` and wait until it and its writer process (``--sqlite-writer process``)
    have ended: the writer is killed with it (``PR_SET_PDEATHSIG``) but ends a moment later,
    and a commit it was in, cut off before SQLite's shared index saw it, is visible only once
    no process of the gateway holds the file (the next opener recovers it from the WAL)."""
    family = children_of(child.pid)
    child.send_signal(signal.SIGKILL)
    child.wait()
    wait_ended(family)
    if child.stderr is not None:
        child.stderr.close()


Snapshot = Callable[[], tuple[dict[str, int], dict[str, str | None], int]]
"""counts by state, {attempting id: owner}, highest reply index recorded."""


def sqlite_snapshot(path: Path) -> Snapshot:
    def snapshot() -> tuple[dict[str, int], dict[str, str | None], int]:
        conn = sqlite3.connect(path, timeout=30)
        try:
            counts = dict(conn.execute("SELECT state, count(*) FROM ledger GROUP BY state"))
            attempting = dict(
                conn.execute("SELECT id, owner FROM ledger WHERE state = 'attempting'")
            )
            ids = [row[0] for row in conn.execute("SELECT id FROM ledger")]
        finally:
            conn.close()
        return counts, attempting, max((reply_index(i) for i in ids), default=-1)

    return snapshot


def reply_index(obligation: str) -> int:
    return int(obligation.split("|")[2].split(":")[1][1:])


def drain_children(
    ledger: str, out: Path, tmp: Path, report: Report, extra: tuple[str, ...]
) -> None:
    for _ in range(8):
        child = start_child(ledger, out, tmp / "drain.phase", mode="drain", extra=extra)
        try:
            _, err = child.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            sigkill(child)
            raise AssertionError("a drain run did not finish within 120 s") from None
        report.drains += 1
        if child.returncode == 0:
            return
        if child.returncode != 3:
            raise AssertionError(f"drain run failed ({child.returncode}): {err.decode()[-2000:]}")
    raise AssertionError("rows were still open after 8 drain runs")


def run_sqlite(
    tmp: Path, *, kills: int, seed: int, boot_share: float = 0.3, extra: tuple[str, ...] = ()
) -> Report:
    """Kill one child ``kills`` times on a SQLite ledger, drain, and check the delivery file."""
    rng = random.Random(seed)
    db, out = tmp / "ledger.db", tmp / "sent.jsonl"
    phase = tmp / "child.phase"
    snapshot = sqlite_snapshot(db)
    report = Report()
    first = 0
    for _ in range(kills):
        child = start_child(str(db), out, phase, mode="serve", first=first, extra=extra)
        if rng.random() < boot_share:
            wait_phase(child, phase, "boot", 30)
            time.sleep(rng.uniform(0, 0.004))
        else:
            wait_phase(child, phase, "serve", 30)
            time.sleep(rng.uniform(0.005, 0.2))
        if child.poll() is not None:
            err = child.stderr.read().decode() if child.stderr else ""
            raise AssertionError(f"the child exited by itself ({child.returncode}): {err[-2000:]}")
        sigkill(child)
        at = time.time()
        counts, attempting, highest = snapshot()
        report.kills.append(Kill(phase.read_text(), counts, set(attempting), at, child.pid))
        first = highest + 1
    drain_children(str(db), out, tmp, report, extra)
    final = _final_rows_sqlite(db)
    check(out, final, report)
    return report


def _final_rows_sqlite(db: Path) -> dict[str, dict[str, Any]]:
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    try:
        return {row["id"]: dict(row) for row in conn.execute("SELECT * FROM ledger")}
    finally:
        conn.close()


def _scripted_to_fail(index: int) -> bool:
    return index % 23 == 5


def _scripted_failures(index: int) -> int:
    """Failed attempts scripted for a reply that spend the resend budget."""
    return int(index % 13 == 3) + int(index % 14 == 1)


_RECORD_START = '{"ev": '


def read_sends(out: Path) -> list[dict[str, Any]]:
    """The delivery file's records. A SIGKILL can tear a line: Linux stops a write() at a page
    boundary of the file when a fatal signal is pending, and the next process appends its own
    line right after the fragment. A torn fragment is dropped: a torn ``start`` was a send in
    flight at a kill (the snapshot after that kill shows its row attempting), a torn ``sent``
    never returned to the ledger (which resends it)."""
    if not out.exists():
        return []
    records: list[dict[str, Any]] = []
    for line in out.read_text(encoding="utf-8").split("\n"):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            # the fragment, then whole records: each whole one starts at a record's opening
            pieces = line.split(_RECORD_START)[1:]
            for piece in pieces:
                try:
                    records.append(json.loads(_RECORD_START + piece))
                except json.JSONDecodeError:
                    continue  # the torn fragment
    return records


def stamp_error_bound(events: list[dict[str, Any]]) -> float:
    """How far a row's ``updated_at`` may be from this host's wall clock (which stamps the send
    events): 0 on SQLite (rows carry the host's clock); on PostgreSQL, where each process stamps
    rows with its estimate of the database clock, the largest error bound any process reported
    (``clock`` lines: half the round trip its estimate rests on). The largest, because the row
    does not say which process stamped it: a claim's freshness verdict abandons a row that any
    live process may have found."""
    return max((e["bound"] for e in events if e["ev"] == "clock"), default=0.0)


def check(
    out: Path,
    final: dict[str, dict[str, Any]],
    report: Report,
    *,
    deaths: dict[int, float] | None = None,
) -> None:
    """Every check over the final rows."""
    events = read_sends(out)
    clock_slack = stamp_error_bound(events)
    report.replies = len(final)
    by_part: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    starts: dict[str, list[dict[str, Any]]] = defaultdict(list)
    claims: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for event in events:
        if event["ev"] == "sent":
            by_part[(event["id"], event["part"])].append(event)
        elif event["ev"] == "lost":
            report.claims_lost += 1
        elif event["ev"] == "claimed":
            claims[event["id"]].append(event)
        elif event["ev"] == "clock":
            continue
        else:
            starts[event["id"]].append(event)
    seen_attempting: dict[str, float] = {}
    for kill in report.kills:
        for obligation in kill.attempting:
            seen_attempting.setdefault(obligation, kill.at)
    problems: list[str] = []
    for obligation, row in final.items():
        index = reply_index(obligation)
        assert row["state"] in ("delivered", "abandoned"), f"{obligation} left {row['state']}"
        parts = len(json.loads(row["chunks"])) if row["chunks"] else 1
        if row["state"] == "abandoned":
            report.abandoned += 1
            late = [s for s in starts[obligation] if s["t"] > row["updated_at"] + clock_slack]
            if late:
                problems.append(f"{obligation}: sent after it was abandoned: {late[0]}")
            if not _scripted_to_fail(index):
                hits = sum(1 for kill in report.kills if obligation in kill.attempting)
                if hits + _scripted_failures(index) < MAX_RESENDS + 1:
                    problems.append(
                        f"{obligation}: abandoned ({row['last_error']}) with only {hits} kills "
                        "mid-send to explain it"
                    )
                report.budget_spent += 1
            continue
        for part in range(parts):
            copies = sorted(by_part[(obligation, part)], key=lambda e: e["t"])
            if not copies:
                problems.append(f"{obligation} part {part}: delivered in the ledger, never sent")
                continue
            report.copies += len(copies)
            unmarked = [c for c in copies if not c["marked"]]
            if len(unmarked) > 1:
                problems.append(f"{obligation} part {part}: {len(unmarked)} unmarked copies")
            for copy in copies:
                if not copy["marked"]:
                    continue
                report.marked += 1
                earlier = any(
                    s["t"] < copy["t"] and s["fence"] < copy["fence"] for s in starts[obligation]
                )
                snap = seen_attempting.get(obligation)
                if not earlier:
                    report.marked_unstarted += 1
                    report.claimed_unsent += any(
                        c["t"] < copy["t"] and c["fence"] < copy["fence"]
                        for c in claims[obligation]
                    )
                    if snap is None or snap > copy["t"]:
                        problems.append(
                            f"{obligation} part {part}: marked but never in flight before"
                        )
    fences: dict[tuple[str, int], set[int]] = defaultdict(set)
    for obligation, events_of in starts.items():
        for event in events_of:
            fences[(obligation, event["fence"])].add(event["pid"])
        if deaths is not None:
            ordered = sorted(events_of, key=lambda e: e["fence"])
            for before, after in itertools.pairwise(ordered):
                if before["pid"] != after["pid"]:
                    died = deaths.get(before["pid"])
                    if died is None or died > after["t"]:
                        problems.append(
                            f"{obligation}: taken by pid {after['pid']} at fence {after['fence']} "
                            f"while pid {before['pid']} (fence {before['fence']}) was alive"
                        )
    for events_of in starts.values():
        # 6. (counted) sends started under a claim older than one another process had already
        # sent under: a process frozen past its lease between its claim (or a later part's check)
        # and its send wakes and sends; nothing can stop that, and the copy that overtook it is
        # marked (check 2). Replies still waiting for their turn must never do it.
        newest: dict[int, int] = {}  # pid -> highest fence it started with so far
        for event in sorted(events_of, key=lambda e: e["t"]):
            others = [fence for pid, fence in newest.items() if pid != event["pid"]]
            if others and max(others) > event["fence"]:
                report.stale_sends += 1
            newest[event["pid"]] = max(newest.get(event["pid"], 0), event["fence"])
    shared = [key for key, pids in fences.items() if len(pids) > 1]
    if shared:
        problems.append(f"claims used by two processes: {shared[:5]}")
    recorded_sends = {e["id"] for e in events if e["ev"] not in ("lost", "claimed", "clock")}
    unknown = recorded_sends - set(final)
    if unknown:
        problems.append(f"sends of replies the ledger does not know: {sorted(unknown)[:5]}")
    if problems:
        raise AssertionError(
            f"{len(problems)} problems:\n" + "\n".join(problems[:30]) + "\n" + report.summary()
        )


def phases_seen(report: Report) -> Counter[str]:
    return Counter(kill.phase for kill in report.kills)


if __name__ == "__main__":  # a quick manual run: python tests/ledger/crash_harness.py DIR
    import tempfile

    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp())
    os.makedirs(folder, exist_ok=True)
    print(run_sqlite(folder, kills=10, seed=1).summary())
