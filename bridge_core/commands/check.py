"""``chatbridge check``: validate the config and print what it resolves to, secrets masked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from bridge_core.commands import config_option, load_cli_config
from bridge_core.commands.providers import describe_budget
from bridge_core.config import BridgeConfig, masked, masked_url

if TYPE_CHECKING:
    from bridge_core.runtime.probes import Probe

__all__ = ["command", "resolved_view"]


def resolved_view(config: BridgeConfig) -> dict[str, Any]:
    """The resolved config as JSON-ready data, with every secret replaced by its source."""
    profiles = {}
    for name, profile in config.profiles.items():
        budget = profile.send_budget
        profiles[name] = {
            "provider": profile.provider,
            "distribution": profile.provider_type.distribution if profile.provider_type else None,
            "settings": masked(profile.settings),
            "budget": budget.to_json() if budget is not None else None,
        }
    return {
        "file": str(config.path) if config.path else None,
        "profiles": profiles,
        "channels": {name: masked(channel) for name, channel in config.channels.items()},
        "stores": masked(config.stores),
        "api": masked(config.api),
        "notify": masked(config.notify),
    }


@click.command("check")
@config_option
@click.option("--json", "as_json", is_flag=True, help="Print the resolved config as JSON.")
@click.option(
    "--connect",
    is_flag=True,
    help="Also connect to the stores and ask each channel's platform whether the bot can post.",
)
def command(config_path: Path | None, as_json: bool, connect: bool) -> None:
    """Validate the config file and print the resolved profiles and channels."""
    config = load_cli_config(config_path)
    # What `run` would refuse at start fails here too, and --connect what it would fail on soon.
    problems = _start_problems(config)
    probes = _probes(config) if connect and not problems else []
    view = resolved_view(config)
    failed = bool(problems) or any(not probe.ok for probe in probes)
    if as_json:
        view["problems"] = problems
        if connect:
            view["connect"] = [probe.to_json() for probe in probes]
        click.echo(json.dumps(view, indent=2))
        if failed:
            raise SystemExit(1)
        return
    if problems:
        raise click.ClickException(
            f"{view['file']}: `chatbridge run` would refuse to start\n" + "\n".join(problems)
        )
    console = Console(highlight=False)
    console.print(f"[green]✓[/] {view['file']} is valid", markup=True)
    profiles = Table(title="profiles")
    for column in ("profile", "provider", "budget", "settings"):
        profiles.add_column(column)
    for name, profile in config.profiles.items():
        budget = describe_budget(profile.send_budget) if profile.send_budget else "-"
        # The table shows what the file sets; --json shows every setting in effect.
        given: set[str] = getattr(profile.settings, "model_fields_set", set())
        shown = {k: v for k, v in view["profiles"][name]["settings"].items() if k in given}
        settings = json.dumps(shown, ensure_ascii=False)
        profiles.add_row(name, profile.provider, budget, settings)
    console.print(profiles)
    channels = Table(title="channels")
    for column in ("channel", "profile", "channel id", "thread", "kinds", "workspaces", "notify"):
        channels.add_column(column)
    for name, channel in config.channels.items():
        notify = channel.notify
        channels.add_row(
            name,
            channel.profile,
            channel.channel_id,
            channel.thread or "-",
            ", ".join(channel.kinds) if channel.kinds is not None else "default",
            ", ".join(channel.workspaces) if channel.workspaces is not None else "all",
            f"hold {notify.hold:g}s, threshold {notify.threshold}, window {notify.window:g}s",
        )
    console.print(channels)
    stores = config.stores
    console.print(
        f"stores: ledger {masked_url(stores.ledger)}, membership {masked_url(stores.membership)}, "
        f"delivery ledger {'on' if stores.delivery_ledger else 'off'}"
    )
    token = "token set" if config.api.token is not None else "no token"
    console.print(f"api: http://{config.api.host}:{config.api.port} ({token})")
    for probe in probes:
        mark = "[green]✓[/]" if probe.ok else "[red]✗[/]"
        console.print(f"{mark} {escape(probe.what)}: {escape(probe.detail)}")
    if failed:
        raise click.ClickException("a store or a platform did not answer as it should (above)")


def _start_problems(config: BridgeConfig) -> list[str]:
    from bridge_core.runtime.probes import start_problems  # the runtime only when checking

    return start_problems(config)


def _probes(config: BridgeConfig) -> list[Probe]:
    from bridge_core.runtime.probes import probe_config

    return anyio.run(probe_config, config)
