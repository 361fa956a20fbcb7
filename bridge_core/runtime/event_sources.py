"""Fleet events as JSON lines, from standard input or a file followed as it grows.

A line that cannot be read is logged with its line number and skipped: one bad line from a
fleet must not stop the notifications of every other agent: text with a lone surrogate or a NUL
and JSON nested too deeply to read are such lines (ADR 0070); a byte that is not UTF-8 is read as
U+FFFD, as a platform's would be. Blank lines are ignored.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import anyio
from anyio.abc import ObjectReceiveStream

from bridge_core.events import EventError, FleetEvent, parse_event_line

__all__ = ["EventSink", "follow_file", "read_lines", "read_stdin"]

log = logging.getLogger("bridge_core.runtime.events")

EventSink = Callable[[Sequence[FleetEvent]], Awaitable[None]]


async def _deliver(line: str, number: int, source: str, sink: EventSink) -> None:
    if not line.strip():
        return
    try:
        event = parse_event_line(line)
    except EventError as exc:
        log.warning("%s line %d: skipped, %s", source, number, exc)
        return
    await sink([event])


async def read_lines(lines: ObjectReceiveStream[str], source: str, sink: EventSink) -> None:
    number = 0
    async for line in lines:
        number += 1
        await _deliver(line, number, source, sink)


async def read_stdin(sink: EventSink) -> None:
    """Events from standard input until it closes (a worker thread reads; the loop never blocks)."""
    number = 0
    # Bytes, decoded here: a byte that is not UTF-8 must cost its line (a U+FFFD, then the
    # event's own check), not end the whole feed with a UnicodeDecodeError.
    stream = getattr(sys.stdin, "buffer", None)
    read = stream.readline if stream is not None else sys.stdin.readline
    while True:
        raw = await anyio.to_thread.run_sync(read, abandon_on_cancel=True)
        if not raw:
            log.info("events on standard input: end of input after %d lines", number)
            return
        number += 1
        line = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        await _deliver(line, number, "stdin", sink)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:  # not created yet: wait for it like an empty file
        return 0


async def follow_file(path: Path, sink: EventSink, *, poll: float = 0.2) -> None:
    """Events from ``path``: what is there, then each line appended later (like ``tail -f``).

    A partial last line waits until its newline arrives. A truncated file is read from the start.
    """
    number = 0
    position = 0
    pending = b""
    while True:
        size = await anyio.to_thread.run_sync(_size, path)
        if size < position:
            log.warning("%s was truncated; reading it from the start", path)
            position, pending, number = 0, b"", 0
        if size > position:

            def read_from(offset: int = position) -> bytes:
                with path.open("rb") as handle:
                    handle.seek(offset)
                    return handle.read()

            chunk = await anyio.to_thread.run_sync(read_from)
            position += len(chunk)
            pending += chunk
            *complete, pending = pending.split(b"\n")
            for raw in complete:
                number += 1
                await _deliver(raw.decode("utf-8", "replace"), number, str(path), sink)
        else:
            await anyio.sleep(poll)
