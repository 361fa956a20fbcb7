"""Drawing the console provider's messages in a terminal with rich.

An edit reprints the message under its id (``✎ #run-3``) rather than redrawing a live view: the
output stays a readable log when piped to a file, and interleaves cleanly with lines typed on
standard input. Agent text is never read as rich markup (``[red]`` in a message stays literal),
and no control character in it reaches the terminal raw: an escape sequence such as
``ESC]0;title BEL`` in a person's or an agent's text could retitle the window, move the cursor or
hide what was printed, so C0 controls are drawn as their Unicode control pictures (``␛``), DEL as
``␡`` and C1 controls as U+FFFD, keeping the line's length and its styles.
"""

from __future__ import annotations

from typing import TextIO

from rich.console import Console
from rich.text import Text

from bridge_core.provider import InboundMessage, MessageRef
from bridge_core.text import valid_text

__all__ = ["ConsoleRenderer", "visible"]

# One visible character for each control a terminal would act on; newline and tab stay layout.
_CONTROL_PICTURES = {
    **{code: chr(0x2400 + code) for code in range(0x20) if chr(code) not in "\n\t"},
    0x7F: "\u2421",
    **{code: "\ufffd" for code in range(0x80, 0xA0)},
}


def visible(text: str) -> str:
    """``text`` safe to write to a terminal: every control character but newline and tab shown as
    one visible character, and a lone surrogate (which no terminal encoding takes) as U+FFFD."""
    return valid_text(text.translate(_CONTROL_PICTURES))


_HANG = " " * 10  # the width of the elapsed-time column


class ConsoleRenderer:
    """Prints posts, edits, errors and inbound lines; ``output=None`` prints nothing."""

    def __init__(
        self, output: TextIO | None, *, width: int | None = None, color: bool | None = None
    ) -> None:
        self._console: Console | None = None
        if output is not None:
            self._console = Console(
                file=output,
                width=width,
                highlight=False,
                markup=False,
                emoji=False,
                no_color=color is False,
                force_terminal=color is True or None,
                soft_wrap=False,
            )

    def _where(self, channel: str, thread: str | None) -> Text:
        where = Text(f"#{channel}", style="bold cyan")
        if thread is not None:
            where.append(f" ↳ {thread}", style="cyan")
        return where

    def _print(self, *parts: Text | str) -> None:
        if self._console is None:
            return
        line = Text()
        for part in parts:
            line.append(part if isinstance(part, Text) else Text(part))
        # One character for one: the spans that colour the parts stay where they were.
        line.plain = visible(line.plain)
        # A multi-line message keeps its later lines indented under the first, past the clock.
        self._console.print(Text("\n" + _HANG).join(line.split("\n")))

    def post(self, ref: MessageRef, text: str, *, t: float) -> None:
        self._print(
            Text(f"{t:9.3f} ", style="dim"),
            self._where(ref.channel, ref.thread),
            Text(f" {ref.message_id} ", style="green"),
            Text(text),
        )

    def edit(self, ref: MessageRef, text: str, *, t: float, edits: int) -> None:
        self._print(
            Text(f"{t:9.3f} ", style="dim"),
            self._where(ref.channel, ref.thread),
            Text(f" ✎ {ref.message_id} (edit {edits}) ", style="yellow"),
            Text(text),
        )

    def error(
        self,
        *,
        op: str,
        channel: str,
        thread: str | None,
        message_id: str | None,
        error: BaseException,
        t: float,
    ) -> None:
        target = f" {message_id}" if message_id else ""
        self._print(
            Text(f"{t:9.3f} ", style="dim"),
            self._where(channel, thread),
            Text(f" ✗ {op}{target} failed: {type(error).__name__}: {error}", style="bold red"),
        )

    def inbound(self, message: InboundMessage, *, t: float) -> None:
        self._print(
            Text(f"{t:9.3f} ", style="dim"),
            self._where(message.channel, message.thread),
            Text(f" > {message.author}: ", style="magenta"),
            Text(message.text),
        )
