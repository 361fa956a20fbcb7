"""A process that stalls inside a transaction must not block the process that recovers its rows.

A frozen process (SIGSTOP, a VM pause) holds whatever row locks its open transaction took; once its
lease lapses, another process claims its rows and would wait on those locks for as long as the
stall lasts. The store sets ``idle_in_transaction_session_timeout`` to the lease, so the server ends
the stalled session and the claim goes through. Real PostgreSQL, real time, lease 1.5 s.
"""

from __future__ import annotations

import time
import uuid

import anyio
import psycopg
import pytest

from bridge_core.ledger import Reply, State
from bridge_core.ledger.postgres import PostgresLedgerStore
from bridge_core.testing.services import require_postgres

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_a_claim_is_not_blocked_by_a_stalled_owners_open_transaction() -> None:
    url = require_postgres()
    prefix = f"stall{uuid.uuid4().hex[:8]}_"
    stalled = PostgresLedgerStore(url, owner="host-a|1|x", table_prefix=prefix, lease=1.5)
    other = PostgresLedgerStore(url, owner="host-b|2|y", table_prefix=prefix, lease=1.5)
    await stalled.open()
    await other.open()
    try:
        reply = Reply.answering(
            profile="X", platform="slack", channel="C1", answers="m1", text="hello"
        )
        row, _ = await stalled.record(reply, now=time.time())
        async with stalled.connection() as conn:
            # The stall: a transaction that took the row's lock and then nothing, while the
            # lease (never renewed: no ledger runs here) lapses.
            await conn.execute("BEGIN")
            await conn.execute(
                f"UPDATE {prefix}ledger SET updated_at = updated_at WHERE id = %s", (row.id,)
            )
            began = time.monotonic()
            with anyio.fail_after(15):  # without the session timeout this waits forever
                claimed = None
                while claimed is None:  # None until the stalled owner's lease has lapsed
                    claimed = await other.claim(row.id, fence=0, now=time.time())
            assert claimed.state is State.ATTEMPTING and claimed.owner == other.owner
            assert time.monotonic() - began < 10
            with pytest.raises(psycopg.Error):  # the server ended the stalled session
                await conn.execute("COMMIT")
        # the store replaced the ended connection: the stalled process can go on
        assert (await stalled.get(row.id)) is not None
    finally:
        await other.drop_tables()
        await other.aclose()
        await stalled.aclose()
