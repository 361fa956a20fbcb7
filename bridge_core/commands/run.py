"""``chatbridge run``: serve the configured channels until SIGTERM/SIGINT."""

from __future__ import annotations

import gc
import logging
from pathlib import Path
from typing import NoReturn

import anyio
import click

from bridge_core.commands import config_option, load_cli_config
from bridge_core.config import BridgeConfig
from bridge_core.ledger import LedgerError, LedgerWriter, Schedule
from bridge_core.ownership import LogUnavailable
from bridge_core.runtime.agents import AgentLoadError
from bridge_core.runtime.gateway import Gateway, GatewayError, GatewayOptions
from bridge_core.runtime.logs import configure_logging
from bridge_core.runtime.serve import config_secrets, exit_process, serve

__all__ = ["LOG_LEVELS", "command", "freeze_startup_objects", "serving_lines"]

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
# What stops a start, said in one line: the config or a store, never a bug's traceback.
_STARTUP_ERRORS = (GatewayError, AgentLoadError, LedgerError, LogUnavailable)

log = logging.getLogger("bridge_core.runtime")


def serving_lines(config: BridgeConfig, gateway: Gateway) -> list[str]:
    """What a started gateway serves, logged once after the gateway's own "serving N channel(s)
    on URL" line (as datasette and uvicorn print theirs): each channel, where it posts and who
    answers there, and the stores."""
    lines = []
    default_agent = gateway.options.default_agent
    for name, channel in config.channels.items():
        profile = config.profiles[channel.profile]
        agent = channel.agent or default_agent
        thread = f" thread {channel.thread}" if channel.thread else ""
        answers = f"agent {agent}" if agent else "no agent (notifications only)"
        lines.append(
            f"channel {name}: {profile.provider} {channel.channel_id}{thread}"
            f" (profile {channel.profile}), {answers}"
        )
    stores = config.stores
    ledger = stores.ledger if stores.delivery_ledger else "off"
    lines.append(f"stores: ledger {ledger}, membership {stores.membership}")
    return lines


@click.command("run")
@config_option
@click.option("--host", default=None, help="Listen on this address (default: [api] host).")
@click.option("--port", type=int, default=None, help="Listen on this port (0: any free port).")
@click.option(
    "--events",
    "events",
    default=None,
    metavar="PATH|-",
    help="Also read fleet events as JSON lines from a file (followed as it grows) or - (stdin).",
)
@click.option(
    "--agent",
    default=None,
    metavar="MODULE:FUNCTION",
    help="The agent for channels that name none in the config.",
)
@click.option(
    "--grace",
    type=float,
    default=10.0,
    show_default=True,
    help="Seconds to finish in-flight sends on SIGTERM.",
)
@click.option(
    "--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True
)
@click.option(
    "--log-level",
    type=click.Choice(LOG_LEVELS, case_sensitive=False),
    default="INFO",
    show_default=True,
)
@click.option(
    "--ready-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write {url, pid, id} as JSON here once serving (for supervisors and tests).",
)
@click.option("--gateway-id", default=None, help="This process's id (default host:pid).")
@click.option(
    "--settle", type=float, default=1.0, show_default=True, help="Agent group settle delay (s)."
)
@click.option(
    "--heartbeat", type=float, default=1.0, show_default=True, help="Agent group heartbeat (s)."
)
@click.option(
    "--key-prefix",
    default="bridge",
    show_default=True,
    help="Namespace of this deployment's Redis keys (scale-out).",
)
@click.option(
    "--ledger-writer",
    type=click.Choice(["auto", "thread", "process"]),
    default="auto",
    show_default=True,
    help="Where a SQLite ledger's writes run: a process of their own, off the event loop "
    "(process), a thread of the gateway (thread), or the process where it can start (auto).",
)
@click.option("--ledger-lease", type=float, default=None, hidden=True)
@click.option("--ledger-table-prefix", default="bridge_", hidden=True)
@click.option("--ledger-sweep-interval", type=float, default=None, hidden=True)
def command(
    config_path: Path | None,
    host: str | None,
    port: int | None,
    events: str | None,
    agent: str | None,
    grace: float,
    log_format: str,
    log_level: str,
    ready_file: Path | None,
    gateway_id: str | None,
    settle: float,
    heartbeat: float,
    key_prefix: str,
    ledger_writer: LedgerWriter,
    ledger_lease: float | None,
    ledger_table_prefix: str,
    ledger_sweep_interval: float | None,
) -> None:
    """Serve the configured channels: notifications, replies and the HTTP API."""
    as_json = log_format == "json"
    # Logging first, so that what loading the plugins and the config reports is in the chosen
    # format too; the config's secrets are added to the redactor once it is read.
    redactor = configure_logging(fmt="json" if as_json else "text", level=log_level.upper())
    try:
        config = load_cli_config(config_path)
    except click.ClickException as exc:
        _fail(exc.format_message(), as_json=as_json)
    redactor.add(config_secrets(config))
    if events == "-":
        readers = [
            name
            for name, profile in config.profiles.items()
            if getattr(profile.settings, "inbound", None) in ("-", "stdin")
        ]
        if readers:
            _fail(
                f'--events - and profile {readers[0]!r} (inbound = "-") would both read '
                "standard input; give one of them a file instead",
                as_json=as_json,
            )
    options = GatewayOptions(
        host=host,
        port=port,
        grace=grace,
        gateway_id=gateway_id,
        settle=settle,
        heartbeat=heartbeat,
        default_agent=agent,
        key_prefix=key_prefix,
        ledger_lease=ledger_lease,
        ledger_table_prefix=ledger_table_prefix,
        ledger_writer=ledger_writer,
        ledger_schedule=(
            Schedule(sweep_interval=ledger_sweep_interval) if ledger_sweep_interval else None
        ),
    )

    def announce(started: Gateway) -> None:
        for line in serving_lines(config, started):
            log.info("%s", line)
        freeze_startup_objects()

    try:
        gateway = Gateway(config, options=options)
        anyio.run(
            lambda: serve(gateway, events=events, ready_file=ready_file, on_ready=announce),
            backend="asyncio",
        )
    except _STARTUP_ERRORS as exc:
        # printed by click, past the log handler: a store URL's password must not ride along
        _fail(redactor.redact(str(exc)), as_json=as_json)
    except BaseExceptionGroup as group:
        found = _startup_error(group)
        if found is None:
            raise
        _fail(redactor.redact(str(found)), as_json=as_json)
    exit_process(0)


def freeze_startup_objects() -> None:
    """Move what start-up built (modules, plugins, the config, the gateway's parts) out of the
    cyclic collector's reach: it lives as long as the process, yet every full collection would
    scan it again (ADR 0156). Only here, in the process's own entry point, as the collector is
    process-wide: a program that embeds a ``Gateway`` keeps its own collector settings. Start-up's
    garbage is collected first, so that none of it is kept for good."""
    gc.collect()
    gc.freeze()


def _fail(message: str, *, as_json: bool) -> NoReturn:
    """Stop with ``message``, said once: click's ``Error:`` line in text mode, one JSON log
    object in JSON mode (where a plain line would break "every line is JSON")."""
    if as_json:
        log.error("%s", message)
        raise SystemExit(1)
    raise click.ClickException(message)


def _startup_error(group: BaseExceptionGroup[BaseException]) -> Exception | None:
    """A configuration problem raised inside the gateway's task groups, to show plainly."""
    for error in group.exceptions:
        if isinstance(error, _STARTUP_ERRORS):
            return error
        if isinstance(error, BaseExceptionGroup):
            found = _startup_error(error)
            if found is not None:
                return found
    return None
