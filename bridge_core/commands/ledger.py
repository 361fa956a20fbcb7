"""``chatbridge ledger``: look at the delivery ledger, retry an abandoned reply, purge old rows.

Safe while the gateway runs: the SQLite file is in WAL mode and every command is a few short
transactions; a retried row is picked up by the running gateway's next sweep.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import anyio
import click
from rich.console import Console
from rich.table import Table

from bridge_core.commands import config_option, load_cli_config
from bridge_core.ledger import LedgerError, LedgerStore, Obligation, State, open_store

__all__ = ["command", "parse_age"]

T = TypeVar("T")
_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")
_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def parse_age(text: str) -> float:
    """``90``, ``90s``, ``15m``, ``2h``, ``7d``, ``1w`` as seconds."""
    match = _AGE.match(text)
    if match is None:
        raise click.BadParameter(f"{text!r} is not an age; write e.g. 90s, 15m, 2h or 7d")
    return float(match.group(1)) * _UNITS[match.group(2)]


def _age(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    return None if value is None else parse_age(value)


STATES = click.Choice([state.value for state in State])


@dataclass
class _Target:
    config_path: Path | None
    location: str | None

    def resolve(self) -> str:
        if self.location:
            return self.location
        config = load_cli_config(self.config_path)
        return config.stores.ledger


def _run(target: _Target, work: Callable[[LedgerStore], Awaitable[T]]) -> T:
    location = target.resolve()
    if "://" not in location and not Path(location).exists():
        raise click.ClickException(
            f"no ledger at {location}: the gateway creates it on its first start "
            "(or pass --ledger PATH|postgresql://...)"
        )

    async def main() -> T:
        try:
            store = await open_store(location)
        except LedgerError as error:
            raise click.ClickException(str(error)) from error
        try:
            return await work(store)
        finally:
            await store.aclose()

    return anyio.run(main)


def _when(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _row_json(row: Obligation) -> dict[str, Any]:
    return {
        "id": row.id,
        "state": row.state.value,
        "profile": row.profile,
        "platform": row.platform,
        "channel": row.channel,
        "thread": row.thread,
        "reply_to": row.reply_to,
        "attempts": row.attempts,
        "resends": row.resends,
        "fence": row.fence,
        "owner": row.owner,
        "created_at": row.created_at,
        "updated_at": row.updated_at,
        "next_attempt_at": row.next_attempt_at,
        "last_error": row.last_error,
        "parts": len(row.chunks),
        "parts_delivered": len(row.delivered),
        "text": row.text,
    }


@click.group("ledger")
@config_option
@click.option(
    "--ledger",
    "location",
    metavar="PATH|URL",
    help="The ledger's SQLite file or postgresql:// URL (default: the config's stores.ledger).",
)
@click.pass_context
def command(ctx: click.Context, config_path: Path | None, location: str | None) -> None:
    """Inspect the delivery ledger (safe while the gateway runs)."""
    ctx.obj = _Target(config_path, location)


@command.command("counts")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def counts_command(target: _Target, as_json: bool) -> None:
    """Rows by state."""
    counts = _run(target, lambda store: store.counts_by_state())
    if as_json:
        click.echo(json.dumps({state.value: count for state, count in counts.items()}))
        return
    table = Table(title="delivery ledger")
    table.add_column("state")
    table.add_column("rows", justify="right")
    for state, count in counts.items():
        table.add_row(state.value, str(count))
    Console(highlight=False).print(table)


@command.command("list")
@click.option("--state", "states", type=STATES, multiple=True, help="Only rows in this state.")
@click.option("--channel", help="Only rows for this channel.")
@click.option(
    "--older-than", callback=_age, help="Only rows created longer ago than this (2h, 7d)."
)
@click.option("--newer-than", callback=_age, help="Only rows created more recently than this.")
@click.option("--limit", type=click.IntRange(1, 100_000), default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per line.")
@click.pass_obj
def list_command(
    target: _Target,
    states: tuple[str, ...],
    channel: str | None,
    older_than: float | None,
    newer_than: float | None,
    limit: int,
    as_json: bool,
) -> None:
    """Rows, newest first."""
    now = time.time()
    rows = _run(
        target,
        lambda store: store.rows(
            states={State(s) for s in states} if states else None,
            channel=channel,
            created_before=None if older_than is None else now - older_than,
            created_after=None if newer_than is None else now - newer_than,
            limit=limit,
        ),
    )
    if as_json:
        for row in rows:
            click.echo(json.dumps(_row_json(row), ensure_ascii=False))
        return
    table = Table(title=f"{len(rows)} rows")
    for column in ("created", "state", "tries"):
        table.add_column(column, no_wrap=True)
    for column in ("profile", "channel", "text", "last error", "id"):
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(
            _when(row.created_at),
            row.state.value,
            f"{row.attempts}/{row.resends}",
            row.profile,
            f"{row.platform}:{row.channel}",
            row.text if len(row.text) <= 40 else row.text[:39] + "…",
            row.last_error or "",
            row.id,
        )
    Console(highlight=False).print(table)


@command.command("retry")
@click.argument("obligation_id")
@click.pass_obj
def retry_command(target: _Target, obligation_id: str) -> None:
    """Send an abandoned reply again (with a fresh resend budget).

    The running gateway serving its profile picks it up at its next sweep; a reply that was
    tried before goes out with the recovery marker.
    """

    async def work(store: LedgerStore) -> Obligation | str | None:
        row = await store.retry(obligation_id, now=time.time())
        if row is not None:
            return row
        current = await store.get(obligation_id)
        return None if current is None else current.state.value

    result = _run(target, work)
    if result is None:
        raise click.ClickException(f"no row {obligation_id!r} in the ledger")
    if isinstance(result, str):
        raise click.ClickException(
            f"row {obligation_id!r} is {result}, not abandoned: only abandoned rows are retried"
        )
    click.echo(f"{obligation_id}: pending again; the gateway sends it at its next sweep")


@command.command("purge")
@click.option(
    "--state",
    "states",
    type=click.Choice([State.DELIVERED.value, State.ABANDONED.value]),
    multiple=True,
    help="Which final rows to delete (default: delivered).",
)
@click.option("--older-than", callback=_age, help="Only rows created longer ago than this (7d).")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_obj
def purge_command(
    target: _Target, states: tuple[str, ...], older_than: float | None, yes: bool
) -> None:
    """Delete delivered (or abandoned) rows. Open rows are never purged."""
    chosen = {State(s) for s in states} if states else {State.DELIVERED}
    what = " and ".join(sorted(s.value for s in chosen))
    age = "" if older_than is None else f" created more than {older_than:.0f} s ago"
    if not yes:
        click.confirm(f"Delete every {what} row{age}?", abort=True)
    before = None if older_than is None else time.time() - older_than
    removed = _run(target, lambda store: store.purge(states=chosen, created_before=before))
    click.echo(f"deleted {removed} {what} rows")
