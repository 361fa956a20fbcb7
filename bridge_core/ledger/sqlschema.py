"""The embedded ledger's file: its schema and how each connection to it is set up.

Kept apart from the store (``sqlite.py``, what each of its calls does), which re-exports these
names for the benchmarks and tests that make a ledger file of their own.
"""

from __future__ import annotations

import sqlite3

from bridge_core.ledger.model import LedgerError

__all__ = ["BUSY_TIMEOUT_MS", "OPEN_SQL", "SCHEMA", "configure_connection", "setup_connection"]

OPEN_SQL = "state = 'pending' OR state = 'attempting' OR state = 'failed'"
"""``ledger_open_rows``'s condition as written there: the planner uses a partial index only for
a query that states its condition."""

SCHEMA = f"""
CREATE TABLE IF NOT EXISTS ledger (
    id TEXT PRIMARY KEY,
    profile TEXT NOT NULL,
    platform TEXT NOT NULL,
    channel TEXT NOT NULL,
    thread TEXT,
    reply_to TEXT,
    text TEXT NOT NULL,
    chunks TEXT NOT NULL DEFAULT '',
    state TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    resends INTEGER NOT NULL DEFAULT 0,
    fence INTEGER NOT NULL DEFAULT 0,
    owner TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    next_attempt_at REAL,
    last_error TEXT,
    penalty INTEGER NOT NULL DEFAULT 0,
    delivered TEXT NOT NULL DEFAULT ''
) WITHOUT ROWID;
-- The open rows, oldest first, for sweeps. Its condition is written as equalities: SQLite
-- evaluates a partial index's condition for the old and the new row of every update that sets
-- ``state``, and an IN list of three builds a temporary table each time (about 0.8 us a row
-- of a claim or a settle, ADR 0134). ``ledger_open``, the IN-list form, is dropped once.
DROP INDEX IF EXISTS ledger_open;
CREATE INDEX IF NOT EXISTS ledger_open_rows ON ledger (created_at, id)
    WHERE {OPEN_SQL};
-- Only delivered rows, for pruning: a claim or a failed send changes no entry of it (an index
-- on (state, updated_at) cost two entry changes per statement, and sweeps picked it over
-- the open rows' index and sorted every open row for every page).
DROP INDEX IF EXISTS ledger_state_updated;
CREATE INDEX IF NOT EXISTS ledger_delivered ON ledger (updated_at) WHERE state = 'delivered';
CREATE TABLE IF NOT EXISTS kv (
    namespace TEXT NOT NULL,
    key TEXT NOT NULL,
    value BLOB NOT NULL,
    PRIMARY KEY (namespace, key)
) WITHOUT ROWID;
"""


BUSY_TIMEOUT_MS = 10_000
"""How long a statement waits for another connection's write lock (the CLI shares the file)."""


def configure_connection(conn: sqlite3.Connection) -> None:
    """WAL, ``synchronous=FULL``, a generous busy timeout (the CLI shares the file)."""
    conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_MS)}")
    mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
    if str(mode).lower() != "wal":
        raise LedgerError(f"could not put the ledger file in WAL mode (got {mode!r})")
    conn.execute("PRAGMA synchronous = FULL")


def setup_connection(conn: sqlite3.Connection) -> None:
    """``configure_connection`` and the schema, made if missing."""
    configure_connection(conn)
    conn.executescript(SCHEMA)
