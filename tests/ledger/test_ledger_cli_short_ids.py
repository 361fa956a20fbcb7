"""``chatbridge ledger list`` at 80 columns with short, shell-safe ids that ``retry`` accepts,
and a retry of a reply abandoned because its channel was unreachable says what that means."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import anyio
from click.testing import CliRunner

from bridge_core.cli import build_cli
from bridge_core.commands.ledger import short_id
from bridge_core.ledger import Reply, State, open_store

LONG = "C" + "0123456789" * 5  # a long channel id makes a long full id


async def _abandoned_rows(path: Path, count: int) -> list[str]:
    store = await open_store(path)
    ids = []
    try:
        for n in range(count):
            reply = Reply.answering(
                profile="ops-slack",
                platform="slack",
                channel=LONG,
                answers=f"1733040000.{n:06d}",
                text=f"reply {n}\nwith a second line and " + "words " * 30,
            )
            row, _ = await store.record(reply, now=time.time())
            abandoned = await store.abandon(
                row.id,
                fence=row.fence,
                now=time.time(),
                reason=f"Unreachable: channel {LONG!r} was given up: channel_not_found",
            )
            assert abandoned is not None and abandoned.state is State.ABANDONED
            ids.append(row.id)
    finally:
        await store.aclose()
    return ids


def test_list_fits_80_columns_and_retry_takes_the_short_id(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    ids = anyio.run(_abandoned_rows, path, 3)
    assert all("|" in full and len(full) > 60 for full in ids)
    runner = CliRunner()
    listed = runner.invoke(build_cli(), ["ledger", "--ledger", str(path), "list"])
    assert listed.exit_code == 0, listed.output
    lines = listed.output.splitlines()
    assert max(len(line) for line in lines) <= 80, listed.output
    for full in ids:
        assert full not in listed.output
        shown = [line for line in lines if short_id(full) in line]
        assert len(shown) == 1, listed.output
    # Three lines a row (the row, its text, its last error) and a heading: never a wrapped id.
    assert len(lines) == 1 + 3 * len(ids), listed.output
    assert re.fullmatch(r"[0-9a-f]{10}", short_id(ids[0]))

    as_json = runner.invoke(build_cli(), ["ledger", "--ledger", str(path), "list", "--json"])
    rows = [json.loads(line) for line in as_json.output.splitlines()]
    assert {row["id"]: row["short_id"] for row in rows} == {full: short_id(full) for full in ids}

    retried = runner.invoke(
        build_cli(), ["ledger", "--ledger", str(path), "retry", short_id(ids[1])]
    )
    assert retried.exit_code == 0, retried.output
    assert f"{short_id(ids[1])}: pending again" in retried.output
    # Abandoned because the channel was given up: the retry says what a running gateway does.
    assert "note: it was abandoned because slack channel" in retried.output
    assert "restart the gateway serving profile 'ops-slack'" in retried.output

    async def state_of(full: str) -> State:
        store = await open_store(path)
        try:
            row = await store.get(full)
            assert row is not None
            return row.state
        finally:
            await store.aclose()

    assert anyio.run(state_of, ids[1]) is State.PENDING
    assert anyio.run(state_of, ids[0]) is State.ABANDONED

    unknown = runner.invoke(build_cli(), ["ledger", "--ledger", str(path), "retry", "0123456789"])
    assert unknown.exit_code == 1 and "no row '0123456789' in the ledger" in unknown.output
