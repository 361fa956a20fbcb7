"""The SQLite sweep's delivered settles (``MergedDelivered``) on a bare connection: rows the
caller knows (their ``created_at``) and rows it does not, refs with and without a thread, each
its own statement; every row keeps its own conditions."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from bridge_core.ledger.sqlite import SCHEMA, configure_connection
from bridge_core.ledger.sqlmerged import MergedDelivered


def _table(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    configure_connection(conn)
    conn.executescript(SCHEMA)
    conn.executemany(
        "INSERT INTO ledger (id, profile, platform, channel, text, state, fence, owner, "
        "created_at, updated_at) VALUES (?, 'X', 'p', 'c', 't', 'attempting', 1, ?, ?, 0)",
        [(f"r{index}", "me" if index != 5 else "other", 10.0 + index) for index in range(8)],
    )
    return conn


def test_each_kind_of_item_settles_by_its_own_conditions(tmp_path: Path) -> None:
    conn = _table(tmp_path / "l.db")
    items = [
        ("r0", 1, 5.0, "C", "m0", "T0", 10.0),  # known, a thread
        ("r1", 1, 5.0, "C", "m1", None, 11.0),  # known, no thread
        ("r2", 1, 5.0, "C", "m2", "T2", None),  # unknown, a thread
        ("r3", 1, 5.0, "C", "m3", None, None),  # unknown, no thread
        ("r4", 1, 5.0, "C", "m4", None, 99.0),  # known at another life: misses
        ("r5", 1, 5.0, "C", "m5", None, 15.0),  # another owner's: misses
        ("r6", 2, 5.0, "C", "m6", "T6", None),  # another fence: misses
        ("r7", 1, 5.0, "C", "m7", "T7", 99.0),  # another life, with a thread: misses
    ]
    conn.execute("BEGIN IMMEDIATE")
    settled = MergedDelivered("me").run_many(conn, items)
    conn.execute("COMMIT")
    assert settled == [True, True, True, True, False, False, False, False]
    found = dict(conn.execute("SELECT id, delivered FROM ledger WHERE state = 'delivered'"))
    assert {key: json.loads(value) for key, value in found.items()} == {
        "r0": [["C", "m0", "T0"]],
        "r1": [["C", "m1", None]],
        "r2": [["C", "m2", "T2"]],
        "r3": [["C", "m3", None]],
    }
