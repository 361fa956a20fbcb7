"""``chatbridge uninstall``: pip-uninstall plugins from the environment chatbridge runs in."""

from __future__ import annotations

import click

from bridge_core.commands.install import run_pip
from bridge_core.plugins import CORE_DISTRIBUTION, normalize_distribution_name

__all__ = ["command"]


@click.command("uninstall")
@click.argument("packages", nargs=-1, required=True)
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
def command(packages: tuple[str, ...], yes: bool) -> None:
    """Uninstall plugins from the environment chatbridge runs in."""
    if any(normalize_distribution_name(name) == CORE_DISTRIBUTION for name in packages):
        # Removing the core from under the running command leaves no chatbridge to reinstall with.
        raise click.UsageError(f"{CORE_DISTRIBUTION} is chatbridge itself; use pip to remove it")
    run_pip("uninstall", *(["--yes"] if yes else []), *packages)
