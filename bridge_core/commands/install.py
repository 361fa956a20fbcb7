"""``chatbridge install``: pip-install plugins into the environment chatbridge itself runs in.

As ``llm install`` and ``datasette install`` do: under pipx (or any virtual environment) a
plain ``pip install`` may land somewhere chatbridge never looks; ``sys.executable -m pip`` cannot.
"""

from __future__ import annotations

import subprocess
import sys

import click

__all__ = ["command", "run_pip"]


def run_pip(*args: str) -> None:
    """Run this interpreter's pip with ``args``; a failure exits with pip's status."""
    done = subprocess.run([sys.executable, "-m", "pip", *args], check=False)
    if done.returncode != 0:
        raise SystemExit(done.returncode)


@click.command("install")
@click.argument("packages", nargs=-1)
@click.option("-U", "--upgrade", is_flag=True, help="Upgrade the packages to their newest version.")
@click.option(
    "-e",
    "--editable",
    "editable",
    multiple=True,
    metavar="PATH",
    help="Install the project at PATH in editable mode (a plugin you are writing).",
)
def command(packages: tuple[str, ...], upgrade: bool, editable: tuple[str, ...]) -> None:
    """Install plugins (names, paths or wheels) where chatbridge finds them.

    \b
      chatbridge install bridge-slack
      chatbridge install ./plugins/discord
      chatbridge install -e ./bridge-zulip
    """
    if not packages and not editable:
        raise click.UsageError("name at least one package, path or wheel to install")
    args = ["install", *(["--upgrade"] if upgrade else [])]
    for path in editable:
        args += ["--editable", path]
    run_pip(*args, *packages)
