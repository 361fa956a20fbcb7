"""``chatbridge``: the command line, a thin shell over the libraries and the runtime.

Commands live in ``bridge_core.commands`` (one module each); ``build_cli()`` assembles them.
Nothing here loads plugins at import: a command asks ``get_plugin_manager()`` when it needs them.
"""

from __future__ import annotations

import importlib
import logging

import click

from bridge_core import __version__
from bridge_core.commands import COMMAND_MODULES, CliState

__all__ = ["build_cli", "main"]


def _add_commands(group: click.Group, names: tuple[str, ...]) -> None:
    for name in names:
        module_name = f"bridge_core.commands.{name}"
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                continue  # that command has not been written yet
            raise
        command = getattr(module, "command", None)
        if not isinstance(command, click.Command):
            raise TypeError(f"{module_name} must define a click command named 'command'")
        group.add_command(command)


def build_cli(command_modules: tuple[str, ...] = COMMAND_MODULES) -> click.Group:
    """The ``chatbridge`` click group with every available command."""

    @click.group(context_settings={"help_option_names": ["-h", "--help"]})
    @click.version_option(__version__, "--version", prog_name="chatbridge")
    @click.option(
        "--strict-plugins",
        is_flag=True,
        envvar="CHATBRIDGE_STRICT_PLUGINS",
        help="Fail when a plugin cannot be loaded instead of reporting it and going on.",
    )
    @click.option("-v", "--verbose", count=True, help="Log more (-v info, -vv debug).")
    @click.pass_context
    def chatbridge(ctx: click.Context, strict_plugins: bool, verbose: int) -> None:
        """Connect a fleet of AI agents to chat platforms."""
        level = logging.WARNING - 10 * min(verbose, 2)
        logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
        ctx.obj = CliState(strict_plugins=strict_plugins)

    _add_commands(chatbridge, command_modules)
    return chatbridge


def main() -> None:
    build_cli()(prog_name="chatbridge")
