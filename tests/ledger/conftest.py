"""Fixtures for the ledger tests: one harness per store kind, so one suite covers them all.

A harness opens stores that act as distinct processes on one shared ledger, and can kill one.
SQLite liveness is read from /proc, so a "second live process" is a real child process whose
identity the store adopts; killing it kills the owner. PostgreSQL liveness is a lease, so a kill
drops the lease row. The memory store keeps a set of live owners.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Literal

import psycopg
import pytest

from bridge_core.ledger import LedgerStore, MemoryBackend, MemoryLedgerStore
from bridge_core.ledger.model import Owner
from bridge_core.ledger.owner import current_owner, process_start
from bridge_core.ledger.postgres import PostgresLedgerStore
from bridge_core.ledger.sqlite import SQLiteLedgerStore
from bridge_core.testing.services import require_postgres


class Harness:
    kind = "?"

    def __init__(self) -> None:
        self.opened: list[LedgerStore] = []

    async def store(self, *, me: bool = False) -> LedgerStore:
        """A store acting as a live process: this one (``me``) or a new one."""
        raise NotImplementedError

    async def kill(self, store: LedgerStore) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        for store in self.opened:
            await store.aclose()


class MemoryHarness(Harness):
    kind = "memory"

    def __init__(self) -> None:
        super().__init__()
        self.backend = MemoryBackend()

    async def store(self, *, me: bool = False) -> LedgerStore:
        store = MemoryLedgerStore(self.backend, owner=f"memory|{uuid.uuid4().hex[:8]}|0")
        await store.open()
        self.opened.append(store)
        return store

    async def kill(self, store: LedgerStore) -> None:
        self.backend.kill(store.owner)


class SQLiteHarness(Harness):
    kind = "sqlite"

    def __init__(self, path: Path, *, writer: Literal["thread", "process"] = "thread") -> None:
        super().__init__()
        self.path = path
        self.writer = writer
        self.children: dict[str, subprocess.Popen[bytes]] = {}

    async def store(self, *, me: bool = False) -> LedgerStore:
        if me:
            owner = None
        else:
            child = subprocess.Popen(  # noqa: ASYNC220 (starting it does not wait)
                [sys.executable, "-c", "import time; time.sleep(120)"]
            )
            started = process_start(child.pid)
            assert started is not None
            owner = str(Owner(current_owner().host, child.pid, started))
            self.children[owner] = child
        store = SQLiteLedgerStore(self.path, owner=owner, writer=self.writer)
        await store.open()
        self.opened.append(store)
        return store

    async def kill(self, store: LedgerStore) -> None:
        child = self.children.pop(store.owner)
        child.kill()
        child.wait()

    async def close(self) -> None:
        await super().close()
        for child in self.children.values():
            child.kill()
            child.wait()


class PostgresHarness(Harness):
    kind = "postgres"

    def __init__(self, url: str) -> None:
        super().__init__()
        self.url = url
        self.prefix = f"t{uuid.uuid4().hex[:10]}_"

    async def store(self, *, me: bool = False) -> LedgerStore:
        owner = None if me and not self.opened else f"pg-test|{uuid.uuid4().hex[:8]}|0"
        store = PostgresLedgerStore(
            self.url, owner=owner, table_prefix=self.prefix, lease=30.0, connections=2
        )
        await store.open()
        self.opened.append(store)
        return store

    async def kill(self, store: LedgerStore) -> None:
        assert isinstance(store, PostgresLedgerStore)
        async with store.connection() as conn:
            await conn.execute(
                f"UPDATE {store.prefix}owners SET lease_until = clock_timestamp() - "
                "interval '1 second' WHERE owner = %s",
                (store.owner,),
            )

    async def close(self) -> None:
        await super().close()
        async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as conn:
            for table in ("ledger", "owners", "kv"):
                await conn.execute(f"DROP TABLE IF EXISTS {self.prefix}{table}")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # psycopg's async connections need asyncio; store I/O runs in real time


@pytest.fixture(params=["memory", "sqlite", "sqlite-process", "postgres"])
async def harness(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Harness]:
    kind: Any = request.param
    made: Harness
    if kind == "memory":
        made = MemoryHarness()
    elif kind == "sqlite":
        made = SQLiteHarness(tmp_path / "ledger.db")
    elif kind == "sqlite-process":  # the hot statements in a writer process (ADR 0186)
        made = SQLiteHarness(tmp_path / "ledger.db", writer="process")
    else:
        made = PostgresHarness(require_postgres())
    try:
        yield made
    finally:
        await made.close()
