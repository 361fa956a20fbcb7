"""``chatbridge ledger``: look at the delivery ledger, retry an abandoned reply, purge old rows.

Safe while the gateway runs: the SQLite file is in WAL mode and every command is a few short
transactions; a retried row is picked up by the running gateway's next sweep.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import json
import re
import sqlite3
import sys
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
from bridge_core.text import text_problem

__all__ = ["SHORT_ID_LENGTH", "command", "parse_age", "short_id"]

SHORT_ID_LENGTH = 10
# How many rows a short id is looked up among (newest first): every row a person would retry.
_SHORT_ID_SCAN = 1_000_000


def short_id(obligation_id: str) -> str:
    """A row's id as ``ledger list`` shows it: 10 hex digits, safe to paste into a shell (the
    full id holds ``|``, which a shell reads as a pipe). ``--json`` keeps the full id."""
    return hashlib.sha256(obligation_id.encode("utf-8", "surrogatepass")).hexdigest()[
        :SHORT_ID_LENGTH
    ]


async def _full_id(store: LedgerStore, given: str) -> str | None:
    """The full id of the row ``given`` names: its full id, or its short id."""
    if await store.get(given) is not None:
        return given
    if not re.fullmatch(f"[0-9a-f]{{{SHORT_ID_LENGTH}}}", given):
        return None
    for row in await store.rows(limit=_SHORT_ID_SCAN):
        if short_id(row.id) == given:
            return row.id
    return None


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


def _text(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """An argument the store can take: a byte the shell passed undecoded (a lone surrogate in
    Python) or a NUL is named here, not a traceback from the database."""
    problem = None if value is None else text_problem(value)
    if problem is not None:
        raise click.BadParameter(problem)
    return value


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
        except Exception as error:
            if not _a_store_error(error):
                raise
            raise click.ClickException(_store_failed(location, error)) from None
        finally:
            await store.aclose()

    return anyio.run(main)


def _a_store_error(error: Exception) -> bool:
    """A failure of the store (a locked file, a database gone), not of this code."""
    if isinstance(error, (LedgerError, OSError, sqlite3.Error)):
        return True
    psycopg = sys.modules.get("psycopg")  # loaded only for a PostgreSQL ledger
    return psycopg is not None and isinstance(error, psycopg.Error)


def _store_failed(location: str, error: Exception) -> str:
    if "://" in location:
        from bridge_core.ledger.postgres import redact_url  # psycopg only for such a ledger

        location = redact_url(location)
    hint = "; another process holds it: try again" if "locked" in str(error) else ""
    return f"the ledger {location} failed: {error}{hint}"


def _when(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _clip(text: str, width: int) -> str:
    line = " ".join(text.split())  # one line per row: newlines would break the table's rhythm
    return line if len(line) <= width else line[: width - 1] + "…"


def _row_json(row: Obligation) -> dict[str, Any]:
    return {
        "id": row.id,
        "short_id": short_id(row.id),
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
@click.option("--channel", callback=_text, help="Only rows for this channel.")
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
    rows = _run(
        target,
        lambda store: store.rows(
            states={State(s) for s in states} if states else None,
            channel=channel,
            created_before=None if older_than is None else store.now() - older_than,
            created_after=None if newer_than is None else store.now() - newer_than,
            limit=limit,
        ),
    )
    if as_json:
        for row in rows:
            click.echo(json.dumps(_row_json(row), ensure_ascii=False))
        return
    # Readable at 80 columns: per row one line with the short id (what `ledger retry` takes),
    # the time in UTC, the state, tries and channel, then the text and the last error indented,
    # each cut to the terminal's width; --json has every field in full.
    console = Console(highlight=False)
    say = functools.partial(console.print, markup=False, no_wrap=True, overflow="ellipsis")
    say(f"{len(rows)} rows, newest first (times UTC; every field in full: --json)")
    for row in rows:
        say(
            f"{short_id(row.id)}  {_when(row.created_at)}  {row.state.value:<10}  "
            f"tries {row.attempts}/{row.resends}  {row.platform}:{row.channel}"
        )
        say("    " + _clip(row.text, console.width))
        if row.last_error:
            say("    ✗ " + _clip(row.last_error, console.width))


@command.command("retry")
@click.argument("obligation_id", callback=_text)
@click.pass_obj
def retry_command(target: _Target, obligation_id: str) -> None:
    """Send an abandoned reply again (with a fresh resend budget).

    OBLIGATION_ID is the short id `ledger list` shows, or the full id of `ledger list --json`.
    The running gateway serving its profile picks it up at its next sweep; a reply that was
    tried before goes out with the recovery marker.
    """

    async def work(store: LedgerStore) -> tuple[str, Obligation | str] | None:
        full = await _full_id(store, obligation_id)
        if full is None:
            return None
        before = await store.get(full)
        row = await store.retry(full, now=store.now())
        if row is not None:
            return full, before if before is not None else row
        current = await store.get(full)
        return None if current is None else (full, current.state.value)

    result = _run(target, work)
    if result is None:
        raise click.ClickException(
            f"no row {obligation_id!r} in the ledger (give the id `ledger list` shows)"
        )
    full, found = result
    if isinstance(found, str):
        raise click.ClickException(
            f"row {obligation_id!r} is {found}, not abandoned: only abandoned rows are retried"
        )
    click.echo(f"{short_id(full)}: pending again; the gateway sends it at its next sweep")
    if (found.last_error or "").startswith("Unreachable"):
        # A gateway that gave the channel up abandons the row again at once (ADR 0013: an
        # Unreachable channel is given up until the gateway starts again).
        click.echo(
            f"note: it was abandoned because {found.platform} channel {found.channel!r} was "
            f"unreachable ({found.last_error}). A running gateway that has given that channel up "
            "abandons it again at once: fix the cause (the bot's access, the channel id), restart "
            "the gateway serving profile "
            f"{found.profile!r} (a start gives every channel a fresh chance), then retry it.",
            err=True,
        )


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
    removed = _run(
        target,
        lambda store: store.purge(
            states=chosen, created_before=None if older_than is None else store.now() - older_than
        ),
    )
    click.echo(f"deleted {removed} {what} rows")
