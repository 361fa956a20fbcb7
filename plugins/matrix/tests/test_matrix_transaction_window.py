"""How long Synapse recognises a transaction id, measured (ADR 0081).

Synapse 1.163 keeps two records of a send's transaction id: the HTTP answer in memory (30 to 60
minutes, lost on a restart) and a row ``(room, user, device, txn_id) -> event`` in its database
(``event_txn_id_device_id``), deleted by a cleanup every 5 minutes once it is 24 hours old, or at
once when the device is logged out. So a resend after a homeserver restart still returns the
first event; a resend after the row is gone is a second message. A server of its own, so the
session's server is never restarted.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import pytest
from bridge_matrix import MatrixProvider, MatrixSettings
from bridge_matrix.testing import start_synapse, synapse_installed

from bridge_core import posting_with_key
from bridge_core.testing import services

pytestmark = pytest.mark.anyio

DAY_MS = 24 * 60 * 60 * 1000


def age_transactions_past_a_day(database: Path) -> int:
    """Make every stored transaction a day and an hour old and apply Synapse's own cleanup
    statement (``_cleanup_old_transaction_ids``) to them: what 24 hours would do."""
    with closing(sqlite3.connect(database)) as conn, conn:
        conn.execute(
            "UPDATE event_txn_id_device_id SET inserted_ts = inserted_ts - ?", (DAY_MS + 3_600_000,)
        )
        now_ms = conn.execute("SELECT CAST(strftime('%s','now') AS INTEGER) * 1000").fetchone()[0]
        deleted = conn.execute(
            "DELETE FROM event_txn_id_device_id WHERE inserted_ts < ?", (now_ms - DAY_MS,)
        ).rowcount
    return int(deleted)


async def test_a_transaction_outlives_a_restart_but_not_a_day(
    tmp_path: Path, make_settings: Callable[..., MatrixSettings]
) -> None:
    if not synapse_installed():
        services.service_unavailable("Synapse (pip install 'bridge-matrix[test]')")
    server = start_synapse(tmp_path / "synapse")
    try:
        bot, person = server.register("bot"), server.register("person")
        room = server.create_room(person, invite=(bot,))
        settings = make_settings(server.base_url, bot)
        with posting_with_key("obligation-window:0"):
            async with MatrixProvider(settings, profile="t") as provider:
                first = await provider.post(room, "answer")
            server.restart()  # the in-memory cache is gone; the database row is not
            async with MatrixProvider(settings, profile="t") as provider:
                after_restart = await provider.post(room, "[resent] answer")
            server.stop()
            assert age_transactions_past_a_day(tmp_path / "synapse" / "homeserver.db") >= 1
            server.restart()
            async with MatrixProvider(settings, profile="t") as provider:
                after_a_day = await provider.post(room, "[resent] answer")
        bodies = [e["content"]["body"] for e in server.messages_by(person, room, bot.user_id)]
    finally:
        server.stop()
    assert after_restart.message_id == first.message_id
    assert after_a_day.message_id != first.message_id
    # Outside the window the resend is a second message; the ledger's marker labels it.
    assert bodies == ["answer", "[resent] answer"]
