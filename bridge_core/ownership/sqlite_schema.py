"""The SQLite conversation log's tables (``log_*``, in the gateway's one database file), and its
writer connection, as the writer thread and the writer process (ADR 0189) both open it."""

from __future__ import annotations

import sqlite3

__all__ = ["SCHEMA", "open_writer"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS log_records (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    channel TEXT NOT NULL,
    kind TEXT NOT NULL,
    inserted_at REAL NOT NULL,
    conversation TEXT,
    message_id TEXT,
    author TEXT,
    body TEXT,
    thread TEXT,
    answers_seq INTEGER,
    member TEXT,
    obligation TEXT,
    since REAL,
    reason TEXT
);
CREATE INDEX IF NOT EXISTS log_records_channel ON log_records (channel, seq);
CREATE INDEX IF NOT EXISTS log_records_time ON log_records (channel, inserted_at);
CREATE INDEX IF NOT EXISTS log_records_conversation
    ON log_records (channel, conversation, seq) WHERE conversation IS NOT NULL;
CREATE TABLE IF NOT EXISTS log_seen (
    channel TEXT NOT NULL,
    message_id TEXT NOT NULL,
    seen_at REAL NOT NULL,
    PRIMARY KEY (channel, message_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS log_seen_time ON log_seen (seen_at);
CREATE TABLE IF NOT EXISTS log_members (
    channel TEXT NOT NULL,
    member TEXT NOT NULL,
    since REAL NOT NULL,
    beat_at REAL NOT NULL,
    PRIMARY KEY (channel, member)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS log_counters (
    channel TEXT PRIMARY KEY,
    admitted INTEGER NOT NULL DEFAULT 0,
    answered INTEGER NOT NULL DEFAULT 0
);
"""


def open_writer(path: str) -> sqlite3.Connection:
    """The log's writer connection on ``path`` (WAL, ``synchronous=FULL``), its tables made."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA busy_timeout = 10000")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.executescript(SCHEMA)
    return conn
