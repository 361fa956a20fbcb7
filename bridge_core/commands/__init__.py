"""The ``chatbridge`` subcommands, one module each, each exposing a click command named ``command``.

``bridge_core.cli`` imports a module of ``COMMAND_MODULES`` (named as its command) only when that
command runs, so a new command is one new module here plus its name in that list. The helpers below
give commands one way to read ``-c/--config``, the plugin manager and the config.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import click

from bridge_core.config import CONFIG_ENV_VAR, BridgeConfig, ConfigError, load_config
from bridge_core.plugins import PluginError, PluginManager, create_plugin_manager

__all__ = [
    "COMMAND_MODULES",
    "CliState",
    "config_option",
    "get_plugin_manager",
    "load_cli_config",
]

COMMAND_MODULES: tuple[str, ...] = (
    "run",
    "demo",
    "simulate",
    "check",
    "providers",
    "plugins",
    "ledger",
    "init",
    "install",
    "uninstall",
    "top",
)

F = TypeVar("F", bound=Callable[..., Any])


@dataclass
class CliState:
    """What the ``chatbridge`` group hands its subcommands (``ctx.obj``)."""

    strict_plugins: bool = False
    manager: PluginManager | None = field(default=None, repr=False)


def _state(ctx: click.Context) -> CliState:
    root = ctx.find_root()
    if not isinstance(root.obj, CliState):
        root.obj = CliState()
    return root.obj


def get_plugin_manager(ctx: click.Context | None = None) -> PluginManager:
    """The plugin manager of this CLI invocation, built (and the hooks run) on first use."""
    state = _state(ctx or click.get_current_context())
    if state.manager is None:
        try:
            state.manager = create_plugin_manager(strict=state.strict_plugins)
        except PluginError as exc:
            raise click.ClickException(str(exc)) from exc
    return state.manager


def config_option(function: F) -> F:
    """``-c/--config PATH`` (default ``$CHATBRIDGE_CONFIG`` or ``bridge.toml``)."""
    return click.option(
        "-c",
        "--config",
        "config_path",
        type=click.Path(dir_okay=False, path_type=Path),
        envvar=CONFIG_ENV_VAR,
        default=None,
        help=f"The TOML config file (default: ${CONFIG_ENV_VAR} or bridge.toml).",
    )(function)


def load_cli_config(config_path: Path | None, ctx: click.Context | None = None) -> BridgeConfig:
    """Load the config with this invocation's plugins; a bad file exits with its problems."""
    manager = get_plugin_manager(ctx)
    try:
        return load_config(config_path, providers=manager.providers)
    except ConfigError as exc:
        raise click.ClickException(f"invalid config\n{exc}") from exc
    except PluginError as exc:
        raise click.ClickException(str(exc)) from exc
