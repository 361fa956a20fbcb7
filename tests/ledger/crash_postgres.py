"""The PostgreSQL runs of the crash harness: two live children share one ledger.

``crash_harness.py`` starts and kills the children and checks what reached the "platform"; here
are the runs where two processes share a PostgreSQL ledger: one killed at a time
(``run_postgres_pair``), one frozen past its lease (``run_postgres_pause``), one whose clock is a
day behind (``run_postgres_skewed``), and the time a takeover takes (``measure_takeover``).
"""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path
from typing import Any

from crash_harness import (
    Child,
    Kill,
    Report,
    check,
    drain_children,
    read_sends,
    reply_index,
    sigkill,
    start_child,
    wait_phase,
)


def postgres_ports(pid: int, server_port: int) -> set[int]:
    """The local ports of ``pid``'s TCP connections to PostgreSQL, read from /proc while it
    lives: the ``client_port`` of each of its backends in ``pg_stat_activity``."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as lines:
            next(lines)
            for line in lines:
                fields = line.split()
                local, remote, inode = fields[1], fields[2], fields[9]
                if inode in inodes and int(remote.rsplit(":", 1)[1], 16) == server_port:
                    ports.add(int(local.rsplit(":", 1)[1], 16))
    return ports


def sigkill_settled(child: Child, url: str, *, timeout: float = 60.0) -> float:
    """SIGKILL ``child``, then wait until PostgreSQL has ended every backend of its
    connections; returns the time of death (``time.time()`` just after the kill).

    A backend finishes the statement its client sent before the kill (a claim's commit, which
    waits for its fsync) and only then finds the client gone and exits. Until every backend
    of the victim has exited, a read of the table may miss a claim that will still commit, and
    the claim's row would then look marked though never in flight. A fixed wait is not enough:
    an fsync on a shared disk has taken over 400 ms here."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    ports = postgres_ports(child.pid, int(conninfo_to_dict(url).get("port") or 5432))
    sigkill(child)
    died = time.time()
    deadline = time.monotonic() + timeout
    with psycopg.connect(url, autocommit=True) as conn:
        while ports:
            ports = {
                row[0]
                for row in conn.execute(
                    "SELECT client_port FROM pg_stat_activity WHERE client_port = ANY(%s)",
                    (sorted(ports),),
                ).fetchall()
            }
            if ports and time.monotonic() > deadline:
                raise AssertionError(f"pid {child.pid}'s backends outlived it by {timeout} s")
            time.sleep(0.005)
    return died


def run_postgres_pair(
    url: str, prefix: str, tmp: Path, *, kills: int, seed: int, lease: float = 1.5
) -> Report:
    """Two live children share a PostgreSQL ledger and answer the same replies; one at a time
    is killed; the survivor must recover the victim's rows; then the victim comes back."""
    import psycopg

    rng = random.Random(seed)
    out = tmp / "sent.jsonl"
    extra = ("--prefix", prefix, "--lease", str(lease))
    report = Report()
    deaths: dict[int, float] = {}
    phases = [tmp / "a.phase", tmp / "b.phase"]
    children = [
        start_child(url, out, phases[n], mode="serve", first=0, extra=extra) for n in range(2)
    ]
    table = f"{prefix}ledger"

    def snapshot() -> tuple[dict[str, int], dict[str, str | None], int]:
        with psycopg.connect(url, autocommit=True) as conn:
            counts = dict(
                conn.execute(f"SELECT state, count(*) FROM {table} GROUP BY state").fetchall()
            )
            attempting = dict(
                conn.execute(f"SELECT id, owner FROM {table} WHERE state = 'attempting'").fetchall()
            )
            ids = [row[0] for row in conn.execute(f"SELECT id FROM {table}").fetchall()]
        return counts, attempting, max((reply_index(i) for i in ids), default=-1)

    try:
        for n in range(2):
            assert wait_phase(children[n], phases[n], "serve", 30), "a child did not start"
        for number in range(kills):
            time.sleep(rng.uniform(0.05, 0.3))
            victim = number % 2
            child = children[victim]
            if child.poll() is not None:
                err = child.stderr.read().decode() if child.stderr else ""
                raise AssertionError(f"child exited by itself ({child.returncode}): {err[-2000:]}")
            deaths[child.pid] = sigkill_settled(child, url)
            counts, attempting, highest = snapshot()
            orphans = {
                oid for oid, owner in attempting.items() if owner and f"|{child.pid}|" in owner
            }
            report.kills.append(Kill("serve", counts, orphans, deaths[child.pid], child.pid))
            # The survivor must take the victim's in-flight rows over once its lease expires.
            deadline = time.monotonic() + lease + 15
            while orphans and time.monotonic() < deadline:
                _, now_attempting, _ = snapshot()
                orphans = {
                    oid
                    for oid in orphans
                    if (now_attempting.get(oid) or "").find(f"|{child.pid}|") >= 0
                }
                time.sleep(0.05)
            assert not orphans, f"the survivor did not recover {sorted(orphans)[:5]}"
            children[victim] = start_child(
                url, out, phases[victim], mode="serve", first=highest + 1, extra=extra
            )
            assert wait_phase(children[victim], phases[victim], "serve", 30)
    finally:
        for child in children:
            if child.poll() is None:
                deaths[child.pid] = sigkill_settled(child, url)
    # The last two kills end the serving phase: record what they left in flight too.
    counts, attempting, _ = snapshot()
    for child in children:
        left = {oid for oid, owner in attempting.items() if owner and f"|{child.pid}|" in owner}
        report.kills.append(Kill("stop", counts, left, deaths[child.pid], child.pid))
    _drain_and_check_postgres(url, table, out, tmp, report, extra, deaths)
    return report


def run_postgres_pause(
    url: str, prefix: str, tmp: Path, *, pauses: int, seed: int, lease: float = 1.5
) -> Report:
    """Two live children on a PostgreSQL ledger, each with a one-lane channel (``--paced``).
    One at a time is frozen (SIGSTOP) past its lease with replies queued behind its lane; the
    other must recover them; then the frozen one is thawed (SIGCONT). It wakes believing it still
    owns those replies: when their turn comes its claim must be lost, and it must send none.
    Each child is frozen at most once (check 5 reads one time per process)."""
    import psycopg

    if pauses > 2:
        raise ValueError("each of the two children can be frozen once: pauses <= 2")

    rng = random.Random(seed)
    out = tmp / "sent.jsonl"
    extra = ("--prefix", prefix, "--lease", str(lease), "--paced", "--send-delay", "0.02")
    report = Report()
    frozen_at: dict[int, float] = {}  # the time each child stopped counting as alive
    phases = [tmp / "a.phase", tmp / "b.phase"]
    firsts = (0, 1_000_000)  # each child answers its own replies
    children = [
        start_child(url, out, phases[n], mode="serve", first=firsts[n], extra=extra)
        for n in range(2)
    ]
    table = f"{prefix}ledger"

    def held_by(pid: int) -> tuple[dict[str, int], set[str]]:
        with psycopg.connect(url, autocommit=True) as conn:
            counts = dict(
                conn.execute(f"SELECT state, count(*) FROM {table} GROUP BY state").fetchall()
            )
            open_rows = conn.execute(
                f"SELECT id FROM {table} WHERE state IN ('pending', 'attempting', 'failed') "
                "AND owner LIKE %s",
                (f"%|{pid}|%",),
            ).fetchall()
        return counts, {row[0] for row in open_rows}

    try:
        for n in range(2):
            assert wait_phase(children[n], phases[n], "serve", 30), "a child did not start"
        for number in range(pauses):
            time.sleep(rng.uniform(0.1, 0.3))
            child = children[number % 2]
            child.send_signal(signal.SIGSTOP)
            frozen_at[child.pid] = time.time()
            counts, held = held_by(child.pid)
            assert counts.get("pending"), f"nothing was queued at the freeze: {counts}"
            report.kills.append(Kill("pause", counts, held, frozen_at[child.pid], child.pid))
            deadline = time.monotonic() + lease + 15
            while held and time.monotonic() < deadline:
                held = held_by(child.pid)[1]
                time.sleep(0.05)
            assert not held, f"the other child did not recover {sorted(held)[:5]}"
            child.send_signal(signal.SIGCONT)
            if child.poll() is not None:
                err = child.stderr.read().decode() if child.stderr else ""
                raise AssertionError(f"the thawed child exited ({child.returncode}): {err[-2000:]}")
            # Thawed, its lane takes the next queued reply: that claim must be lost.
            if not _wait_lost(out, child.pid, 30):
                raise AssertionError(f"pid {child.pid} met no lost claim after it was thawed")
    finally:
        for child in children:
            if child.poll() is None:
                child.send_signal(signal.SIGCONT)
                sigkill_settled(child, url)
    # The final kills end the run: record what they left claimed, as run_postgres_pair does.
    for child in children:
        counts, left = held_by(child.pid)
        report.kills.append(Kill("stop", counts, left, time.time(), child.pid))
    _drain_and_check_postgres(url, table, out, tmp, report, extra, frozen_at)
    return report


def run_postgres_skewed(
    url: str, prefix: str, tmp: Path, *, skew: float, kills: int, seed: int, lease: float = 1.5
) -> tuple[Report, int, int]:
    """A healthy child and one whose wall clock runs ``skew`` seconds behind share a PostgreSQL
    ledger; the skewed one is killed with replies recorded and unsent, ``kills`` times (started
    again each time), and the healthy one must deliver them. Returns the report, how many of the
    skewed children's replies were open at their kills, and how many rows ended abandoned as too
    old (the ledger's freshness bound is an hour in the child)."""
    import psycopg

    rng = random.Random(seed)
    out = tmp / "sent.jsonl"
    extra = ("--prefix", prefix, "--lease", str(lease))
    report = Report()
    deaths: dict[int, float] = {}
    table = f"{prefix}ledger"
    healthy = start_child(url, out, tmp / "h.phase", mode="serve", first=1_000_000, extra=extra)
    orphaned = 0
    try:
        assert wait_phase(healthy, tmp / "h.phase", "serve", 30), "the healthy child did not start"
        first = 0
        for _ in range(kills):
            skewed = start_child(
                url,
                out,
                tmp / "s.phase",
                mode="serve",
                first=first,
                extra=(*extra, "--skew", str(skew)),
            )
            assert wait_phase(skewed, tmp / "s.phase", "serve", 30), (
                "the skewed child did not start"
            )
            time.sleep(rng.uniform(0.05, 0.2))
            if skewed.poll() is not None:
                err = skewed.stderr.read().decode() if skewed.stderr else ""
                raise AssertionError(
                    f"the skewed child exited ({skewed.returncode}): {err[-2000:]}"
                )
            deaths[skewed.pid] = sigkill_settled(skewed, url)
            with psycopg.connect(url, autocommit=True) as conn:
                counts = dict(
                    conn.execute(f"SELECT state, count(*) FROM {table} GROUP BY state").fetchall()
                )
                left = _open_rows_of(conn, table, skewed.pid)
                first = 1 + max(
                    (
                        reply_index(r[0])
                        for r in conn.execute(f"SELECT id FROM {table}").fetchall()
                        if reply_index(r[0]) < 1_000_000
                    ),
                    default=-1,
                )
            orphaned += len(left)
            report.kills.append(Kill("serve", counts, left, deaths[skewed.pid], skewed.pid))
            deadline = time.monotonic() + lease + 15
            while left and time.monotonic() < deadline:
                with psycopg.connect(url, autocommit=True) as conn:
                    left = _open_rows_of(conn, table, skewed.pid)
                time.sleep(0.05)
            assert not left, f"the healthy child did not take over {sorted(left)[:5]}"
    finally:
        if healthy.poll() is None:
            deaths[healthy.pid] = sigkill_settled(healthy, url)
    _record_final_kills(url, table, [healthy], deaths, report)
    with psycopg.connect(url, autocommit=True) as conn:
        too_old = conn.execute(
            f"SELECT count(*) FROM {table} WHERE state = 'abandoned' "
            "AND last_error LIKE '%%freshness%%'"
        ).fetchone()
    stale = int(too_old[0]) if too_old else 0
    _drain_and_check_postgres(url, table, out, tmp, report, extra, deaths)
    return report, orphaned, stale


def measure_takeover(
    url: str, prefix: str, tmp: Path, *, kills: int, lease: float, sweep: float, seed: int
) -> tuple[list[float], Report]:
    """Seconds from each SIGKILL of one of two live children on a PostgreSQL ledger (``lease``,
    periodic sweep every ``sweep`` s) until every reply it left open was delivered or abandoned
    by the survivor. The victim is started again after each measurement."""
    import psycopg

    rng = random.Random(seed)
    out = tmp / "sent.jsonl"
    extra = ("--prefix", prefix, "--lease", str(lease), "--sweep", str(sweep))
    table = f"{prefix}ledger"
    report = Report()
    deaths: dict[int, float] = {}
    phases = [tmp / "a.phase", tmp / "b.phase"]
    firsts = [0, 1_000_000]
    children = [
        start_child(url, out, phases[n], mode="serve", first=firsts[n], extra=extra)
        for n in range(2)
    ]
    times: list[float] = []

    try:
        for n in range(2):
            assert wait_phase(children[n], phases[n], "serve", 30), "a child did not start"
        for number in range(kills):
            time.sleep(rng.uniform(0.3, 0.6))
            victim = children[number % 2]
            killed = time.monotonic()
            # the lease outlasts the wait: nothing is taken over meanwhile
            deaths[victim.pid] = sigkill_settled(victim, url)
            with psycopg.connect(url, autocommit=True) as conn:
                left = _open_rows_of(conn, table, victim.pid)
                counts = dict(
                    conn.execute(f"SELECT state, count(*) FROM {table} GROUP BY state").fetchall()
                )
                report.kills.append(Kill("serve", counts, left, deaths[victim.pid], victim.pid))
                assert left, "the kill left nothing to recover"
                waiting = set(left)
                while waiting and time.monotonic() - killed < lease + 60:
                    waiting = {
                        row[0]
                        for row in conn.execute(
                            f"SELECT id FROM {table} WHERE id = ANY(%s) AND state NOT IN "
                            "('delivered', 'abandoned')",
                            (sorted(waiting),),
                        ).fetchall()
                    }
                    time.sleep(0.01)
            assert not waiting, f"not recovered within {lease + 60} s: {sorted(waiting)[:3]}"
            times.append(time.monotonic() - killed)
            firsts[number % 2] = 10_000_000 * (number + 1)  # a fresh range of replies
            children[number % 2] = start_child(
                url, out, phases[number % 2], mode="serve", first=firsts[number % 2], extra=extra
            )
            assert wait_phase(children[number % 2], phases[number % 2], "serve", 30)
    finally:
        for child in children:
            if child.poll() is None:
                deaths[child.pid] = sigkill_settled(child, url)
    _record_final_kills(url, table, children, deaths, report)
    # every check, including: no reply passed from a process to another while the first lived
    _drain_and_check_postgres(url, table, out, tmp, report, extra, deaths)
    return times, report


def _open_rows_of(conn: Any, table: str, pid: int) -> set[str]:
    """The open rows the process ``pid`` holds (its owner id names its pid)."""
    return {
        row[0]
        for row in conn.execute(
            f"SELECT id FROM {table} WHERE state IN ('pending', 'attempting', 'failed') "
            "AND owner LIKE %s",
            (f"%|{pid}|%",),
        ).fetchall()
    }


def _record_final_kills(
    url: str,
    table: str,
    children: list[Child],
    deaths: dict[int, float],
    report: Report,
) -> None:
    """The kills that end a run: record what each left attempting, as ``run_postgres_pair``
    does, so the checks know those rows were in flight."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        counts = dict(
            conn.execute(f"SELECT state, count(*) FROM {table} GROUP BY state").fetchall()
        )
        attempting = dict(
            conn.execute(f"SELECT id, owner FROM {table} WHERE state = 'attempting'").fetchall()
        )
    for child in children:
        left = {oid for oid, owner in attempting.items() if owner and f"|{child.pid}|" in owner}
        report.kills.append(Kill("stop", counts, left, deaths[child.pid], child.pid))


def _drain_and_check_postgres(
    url: str,
    table: str,
    out: Path,
    tmp: Path,
    report: Report,
    extra: tuple[str, ...],
    deaths: dict[int, float],
) -> None:
    """Drain what the children left, then run every check over the final rows."""
    import psycopg

    drain_children(url, out, tmp, report, extra)
    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.execute(f"SELECT * FROM {table}")
        names = [column.name for column in cursor.description or ()]
        final = {row[0]: dict(zip(names, row, strict=True)) for row in cursor.fetchall()}
    for row in final.values():
        row["chunks"] = row["chunks"] or ""
    # PostgreSQL rows carry the database's clock as each host estimated it (the middle of its
    # quickest recent round trip, so off by at most half of it), not the host's wall clock: a
    # reply that fails at once is stamped abandoned up to that much "before" its own start. The
    # children report that bound (``clock`` lines) and ``check`` allows it.
    check(out, final, report, deaths=deaths)


def _wait_lost(out: Path, pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(e["ev"] == "lost" and e["pid"] == pid for e in read_sends(out)):
            return True
        time.sleep(0.02)
    return False
