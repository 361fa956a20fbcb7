"""``chatbridge demo``: the gateway on embedded defaults with a simulated fleet."""

from __future__ import annotations

import logging
from pathlib import Path

import anyio
import click

from bridge_core.runtime.demo import run_demo
from bridge_core.runtime.logs import configure_logging
from bridge_core.runtime.serve import exit_process

__all__ = ["command"]


@click.command("demo")
@click.option(
    "--seconds",
    type=click.FloatRange(min=1.0),
    default=12.0,
    show_default=True,
    help="Stop after this long.",
)
@click.option("--forever", is_flag=True, help="Keep running until Ctrl-C.")
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where the SQLite file and the transcript go (default: a new temporary folder).",
)
@click.option(
    "--interactive/--scripted",
    default=None,
    help="Answer lines from standard input (the default; scripted user messages play until "
    "the first line) or ignore standard input and play only the scripted ones.",
)
@click.option(
    "--agent-process",
    is_flag=True,
    help="Answer with an agent running as its own process, connected to the gateway's "
    "/v1/agents socket (python -m bridge_core.agent.example), instead of one inside it.",
)
def command(
    seconds: float,
    forever: bool,
    data_dir: Path | None,
    interactive: bool | None,
    agent_process: bool,
) -> None:
    """Show what the bridge does: live messages, a burst summary, a crash, a rate-limit pause,
    replies from an echo agent, and the ledger's counts."""
    configure_logging(level=logging.WARNING)

    async def main() -> None:
        await run_demo(
            seconds=seconds,
            forever=forever,
            data_dir=data_dir,
            interactive=interactive,
            agent_process=agent_process,
        )

    try:
        anyio.run(main, backend="asyncio")
    except KeyboardInterrupt:
        click.echo("demo interrupted", err=True)
        exit_process(130)
    exit_process(0)
