"""``chatbridge providers``: the installed provider types, and the plugins that failed to load."""

from __future__ import annotations

import json

import click
from rich.console import Console
from rich.table import Table

from bridge_core.commands import get_plugin_manager
from bridge_core.plugins import PluginError, RegisteredProvider
from bridge_core.provider import UNLIMITED_BUDGET, SendBudget

__all__ = ["command", "describe_budget"]


def describe_budget(budget: SendBudget) -> str:
    """``burst 3, 3600/h, ≤3600/3600s, edit 2s`` — one line for a table cell."""
    if budget == UNLIMITED_BUDGET:
        return "unlimited"
    parts = [f"burst {budget.burst}", f"{budget.per_second * 3600:g}/h"]
    parts += [f"≤{w.limit}/{w.seconds:g}s" for w in budget.windows]
    parts.append(f"edit {budget.edit_spacing:g}s")
    return ", ".join(parts)


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


@click.command("providers")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def command(as_json: bool) -> None:
    """List the installed providers with their capabilities and budgets."""
    manager = get_plugin_manager()
    try:
        entries: list[RegisteredProvider] = manager.providers.entries()
    except PluginError as exc:
        raise click.ClickException(str(exc)) from exc
    if as_json:
        payload = {
            "providers": [entry.to_json() for entry in entries],
            "broken": [broken.to_json() for broken in manager.broken],
        }
        click.echo(json.dumps(payload, indent=2))
        return
    console = Console(highlight=False)
    table = Table(title="chat providers")
    for column in ("name", "distribution", "edit", "max length", "threads", "inbound", "budget"):
        table.add_column(column)
    for entry in entries:
        caps = entry.type.capabilities
        table.add_row(
            entry.type.name,
            f"{entry.distribution} {entry.version}",
            _yes(caps.edit),
            f"{caps.max_length} {caps.length_unit.value}",
            _yes(caps.threads),
            _yes(caps.inbound),
            describe_budget(entry.type.budget),
        )
    console.print(table)
    for broken in manager.broken:
        console.print(f"[bold red]broken plugin:[/] {broken.describe()}", markup=True)
