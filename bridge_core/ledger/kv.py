"""The key-value store the core lends providers, kept beside the ledger (same file or database).

``key_value_store(store)`` gives the one that fits an open ledger store; every class here
implements ``bridge_core.provider.KeyValueStore``. Values are bytes; the namespace is the
provider's name, so providers never see each other's keys.
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING

from bridge_core.ledger.memory import MemoryLedgerStore
from bridge_core.ledger.sqlite import SQLiteLedgerStore
from bridge_core.ledger.store import LedgerStore
from bridge_core.provider import KeyValueStore

if TYPE_CHECKING:  # psycopg is imported only when a PostgreSQL ledger is opened
    from bridge_core.ledger.postgres import PostgresLedgerStore

__all__ = [
    "MemoryKeyValueStore",
    "PostgresKeyValueStore",
    "SQLiteKeyValueStore",
    "key_value_store",
]


def _check(namespace: str, key: str) -> None:
    if not namespace or not key:
        raise ValueError(f"key-value namespace and key must not be empty: {namespace!r}/{key!r}")


class MemoryKeyValueStore:
    def __init__(self) -> None:
        self._values: dict[tuple[str, str], bytes] = {}

    async def get(self, namespace: str, key: str) -> bytes | None:
        return self._values.get((namespace, key))

    async def put(self, namespace: str, key: str, value: bytes) -> None:
        _check(namespace, key)
        self._values[(namespace, key)] = bytes(value)

    async def delete(self, namespace: str, key: str) -> None:
        self._values.pop((namespace, key), None)


class SQLiteKeyValueStore:
    """The ``kv`` table of the ledger's SQLite file, through the ledger's writer thread."""

    def __init__(self, store: SQLiteLedgerStore) -> None:
        self._writer = store.writer

    async def get(self, namespace: str, key: str) -> bytes | None:
        def run(conn: sqlite3.Connection) -> bytes | None:
            found = conn.execute(
                "SELECT value FROM kv WHERE namespace = ? AND key = ?", (namespace, key)
            ).fetchone()
            return None if found is None else bytes(found[0])

        return await self._writer.call(run)

    async def put(self, namespace: str, key: str, value: bytes) -> None:
        _check(namespace, key)

        def run(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT INTO kv (namespace, key, value) VALUES (?, ?, ?) "
                "ON CONFLICT (namespace, key) DO UPDATE SET value = excluded.value",
                (namespace, key, bytes(value)),
            )

        await self._writer.call(run)

    async def delete(self, namespace: str, key: str) -> None:
        def run(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM kv WHERE namespace = ? AND key = ?", (namespace, key))

        await self._writer.call(run)


class PostgresKeyValueStore:
    """The ``<prefix>kv`` table beside a PostgreSQL ledger."""

    def __init__(self, store: PostgresLedgerStore) -> None:
        self._store = store
        self._table = f"{store.prefix}kv"

    async def get(self, namespace: str, key: str) -> bytes | None:
        async with self._store.connection() as conn:
            cursor = await conn.execute(
                f"SELECT value FROM {self._table} WHERE namespace = %s AND key = %s",
                (namespace, key),
            )
            found = await cursor.fetchone()
        return None if found is None else bytes(found[0])

    async def put(self, namespace: str, key: str, value: bytes) -> None:
        _check(namespace, key)
        async with self._store.connection() as conn:
            await conn.execute(
                f"INSERT INTO {self._table} (namespace, key, value) VALUES (%s, %s, %s) "
                "ON CONFLICT (namespace, key) DO UPDATE SET value = excluded.value",
                (namespace, key, bytes(value)),
            )

    async def delete(self, namespace: str, key: str) -> None:
        async with self._store.connection() as conn:
            await conn.execute(
                f"DELETE FROM {self._table} WHERE namespace = %s AND key = %s", (namespace, key)
            )


def key_value_store(store: LedgerStore) -> KeyValueStore:
    """The key-value store kept beside an open ledger ``store``."""
    if isinstance(store, SQLiteLedgerStore):
        return SQLiteKeyValueStore(store)
    if type(store).__name__ == "PostgresLedgerStore":
        from bridge_core.ledger.postgres import PostgresLedgerStore

        assert isinstance(store, PostgresLedgerStore)
        return PostgresKeyValueStore(store)
    if isinstance(store, MemoryLedgerStore):
        return MemoryKeyValueStore()
    raise TypeError(f"no key-value store is kept beside a {type(store).__name__}")
