"""Blocks read from the project itself: the ADR index, the CLI's help, the README's commands."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bridge_docgen.text import cell

__all__ = ["ADR_FILE", "adr_index", "cli_help", "cli_ledger", "cli_reference", "readme_commands"]

DOCS_DIR = Path(__file__).resolve().parent.parent


def _adr_title(path: Path) -> str:
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# "):
            # "0001. Title", "ADR 0001: Title" and "ADR-0001 - Title" all read as "Title".
            return re.sub(r"^(ADR[- ]?)?\d{4}[.:\s-]*", "", line[2:].strip()) or path.stem
    return path.stem


ADR_FILE = re.compile(r"^\d{4}-.+\.md$")


def adr_index(names: Iterable[str] | None = None) -> str:
    """A list of every decision record in ``docs/adr/``, by number.

    ``names`` are the record files the site build collected (so a record added while the site
    builds is not linked before it is a page); by default, the files in the folder.
    """
    if names is None:
        names = (p.name for p in (DOCS_DIR / "adr").iterdir())
    files = sorted(DOCS_DIR / "adr" / name for name in names if ADR_FILE.match(name))
    if not files:
        return "No decisions recorded yet.\n"
    lines = ["| number | decision |", "|---|---|"]
    for path in files:
        number = path.name[:4]
        lines.append(f"| {number} | [{cell(_adr_title(path))}]({path.name}) |")
    return "\n".join(lines) + "\n"


def _command_help(command: Any, words: list[str]) -> list[str]:
    """The ``--help`` text of a click command and of each subcommand, as markdown sections."""
    import click

    name = " ".join(words)
    with click.Context(
        command, info_name=name, terminal_width=100, help_option_names=["-h", "--help"]
    ) as ctx:
        text = command.get_help(ctx)
    level = "#" * min(2 + len(words) - 1, 4)
    out = [f"{level} `{name}`\n", f"```\n{text}\n```\n"]
    if isinstance(command, click.Group):
        for sub_name in command.list_commands(ctx):
            sub = command.get_command(ctx, sub_name)
            if sub is not None and not sub.hidden:
                out.extend(_command_help(sub, [*words, sub_name]))
    return out


def cli_help(*path: str) -> str:
    """``chatbridge [path...] --help``, recursively, from the real click commands."""
    import click

    from bridge_core.cli import build_cli

    command: click.Command = build_cli()
    words = ["chatbridge"]
    for word in path:
        assert isinstance(command, click.Group)
        with click.Context(command) as ctx:
            sub = command.get_command(ctx, word)
        if sub is None:
            raise LookupError(f"chatbridge has no command {' '.join([*words[1:], word])!r}")
        command = sub
        words.append(word)
    return "\n".join(_command_help(command, words))


def cli_reference() -> str:
    return cli_help()


def cli_ledger() -> str:
    return cli_help("ledger")


README_BLOCK = re.compile(
    r"<!-- (demo|test)-command -->\s*(```.*?```)\s*<!-- /\1-command -->", re.S
)


def readme_commands() -> str:
    """The README's two commands (between its ``<!-- demo-command -->`` and
    ``<!-- test-command -->`` markers), so the docs cannot tell a different story."""
    readme = (DOCS_DIR.parent / "README.md").read_text(encoding="utf-8")
    blocks = {match.group(1): match.group(2) for match in README_BLOCK.finditer(readme)}
    missing = {"demo", "test"} - set(blocks)
    if missing:
        raise LookupError(f"README.md has no <!-- {'/'.join(sorted(missing))}-command --> block")
    return (
        f"Try it (the demo):\n\n{blocks['demo']}\n\nRun the whole test suite:\n\n{blocks['test']}\n"
    )
