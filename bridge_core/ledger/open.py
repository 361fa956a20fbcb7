"""Open a ledger store from a config value: a file path (SQLite) or a ``postgresql://`` URL."""

from __future__ import annotations

from pathlib import Path

from bridge_core.ledger.model import LedgerError, LedgerWriter
from bridge_core.ledger.store import LedgerStore

__all__ = ["open_store"]


async def open_store(
    location: str | Path,
    *,
    owner: str | None = None,
    table_prefix: str = "bridge_",
    lease: float = 60.0,
    sqlite_writer: LedgerWriter = "thread",
) -> LedgerStore:
    """Open (and create if needed) the ledger at ``location`` and register this process.

    ``owner`` overrides this process's owner id (tests); ``table_prefix`` names the PostgreSQL
    tables (SQLite always uses ``ledger``); ``lease`` is the PostgreSQL owner lease in seconds
    (how long a dead gateway's rows wait before a live one takes them over);
    ``sqlite_writer`` says where a SQLite ledger's record, claim and settle statements run:
    ``"thread"`` on the file's writer thread; ``"process"`` in a writer process of their own,
    off the event loop's GIL (ADR 0186); ``"auto"``, the gateway's default, in the process, or
    on the thread when none can start (ADR 0187). A short-lived command keeps the thread.
    """
    text = str(location)
    store: LedgerStore
    if text.startswith(("postgresql://", "postgres://")):
        from bridge_core.ledger.postgres import PostgresLedgerStore

        store = PostgresLedgerStore(text, owner=owner, table_prefix=table_prefix, lease=lease)
    elif "://" in text and not text.startswith("sqlite://"):
        raise LedgerError(
            f"ledger location {text!r} is neither a file path nor a postgresql:// URL; "
            "set `ledger` to a SQLite file path or a postgresql://user@host/db URL"
        )
    else:
        from bridge_core.ledger.sqlite import SQLiteLedgerStore

        path = text.removeprefix("sqlite://")
        store = SQLiteLedgerStore(path, owner=owner, writer=sqlite_writer)
    await store.open()
    return store
