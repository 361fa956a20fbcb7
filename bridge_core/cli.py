"""``chatbridge``: the command line, a thin shell over the libraries and the runtime.

Commands live in ``bridge_core.commands`` (one module each, named as the command);
``build_cli()`` assembles them, importing each module only when its command runs.
Nothing here loads plugins at import: a command asks ``get_plugin_manager()`` when it needs them.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any

import click

from bridge_core import __version__
from bridge_core.commands import COMMAND_MODULES, CliState

__all__ = ["build_cli", "main"]


class _LazyGroup(click.Group):
    """A group that imports a command's module only when that command is used.

    ``chatbridge providers`` should not pay for importing the gateway, aiohttp and trio; only
    ``--help`` (which lists every command's summary) imports them all.
    """

    def __init__(self, *args: Any, command_modules: tuple[str, ...], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.command_modules = command_modules

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.command_modules})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.command_modules:
            return super().get_command(ctx, cmd_name)
        module_name = f"bridge_core.commands.{cmd_name}"
        command = getattr(importlib.import_module(module_name), "command", None)
        if not isinstance(command, click.Command):
            raise TypeError(f"{module_name} must define a click command named 'command'")
        return command


def build_cli(command_modules: tuple[str, ...] = COMMAND_MODULES) -> click.Group:
    """The ``chatbridge`` click group with every available command."""

    @click.group(
        cls=_LazyGroup,
        command_modules=command_modules,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
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

    return chatbridge


def main() -> None:
    build_cli()(prog_name="chatbridge")
