"""``chatbridge plugins``: installed plugin distributions and the hooks they implement, as JSON."""

from __future__ import annotations

import json

import click

from bridge_core.commands import get_plugin_manager

__all__ = ["command"]


@click.command("plugins")
@click.option("--all", "show_all", is_flag=True, help="Include the built-in plugins.")
def command(show_all: bool) -> None:
    """Print the loaded plugins (and the ones that failed to load) as JSON."""
    manager = get_plugin_manager()
    plugins = [p.to_json() for p in manager.plugins() if show_all or not p.builtin]
    payload = {
        "plugins": plugins,
        "broken": [b.to_json() for b in manager.broken],
        # Named by CHATBRIDGE_LOAD_PLUGINS but not installed (also warned about on stderr).
        "missing": list(manager.missing),
    }
    click.echo(json.dumps(payload, indent=2))
