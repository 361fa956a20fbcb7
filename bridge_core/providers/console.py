"""The built-in console provider: a real provider that writes to the terminal and a transcript.

It is registered through ``register_providers`` like any plugin. Each post or edit is drawn with
rich (an edit reprints the message under its id) and appended to a JSON Lines transcript, one
object per line, flushed per line::

    {"t": 1.5, "at": 1767225600.1, "op": "post", "channel": "ops", "thread": null,
     "message_id": "5f3a9c1e-3", "text": "...", "error": null, "retry_after": null}

``t`` is seconds since the provider started on anyio's clock (virtual under ``simulate``), ``at``
epoch seconds; ``op`` is ``post``, ``edit`` or ``error`` (``error`` holds the error's class name).
Message ids are a random run prefix plus a counter, so they stay unique across restarts.

A console started on an existing transcript knows the messages it records, so it can edit
them, as a platform keeps a bot's messages across the bot's restarts.

Faults are scripted with ``script_fault(channel, error)`` (the next send to that channel raises
it) or listed in the settings; ``block(channel)`` makes posts raise ``Forbidden`` and ``probe``
answer False until ``unblock``. Inbound, lines typed on standard input (or read from a file) become
``InboundMessage``\\ s; a line ``#other text`` goes to channel ``other``; a JSON object line
``{"id": ..., "text": ..., "channel"?, "author"?, "thread"?}`` carries its own message id.

Text from the terminal, an inbound file or an agent is made valid before it is used (ADR 0070):
undecodable bytes and lone surrogates become U+FFFD, and neither the terminal (``console_render``)
nor the transcript (C1 controls and DEL written as ``\\u`` escapes) is sent a raw control
character.

The transcript is written synchronously: a flushed line to a local file takes microseconds, and
handing it to a worker thread would let trio's autojump clock move virtual time under ``simulate``.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import sys
import time
from collections import deque
from pathlib import Path
from typing import IO, Any, Literal, TextIO

import anyio
from pydantic import BaseModel, ConfigDict, Field

from bridge_core.config import BudgetSpec
from bridge_core.hookspecs import ProviderContext, ProviderType, hookimpl
from bridge_core.provider import (
    UNLIMITED_BUDGET,
    Capabilities,
    ChatProvider,
    Forbidden,
    InboundMessage,
    InboundSink,
    LengthUnit,
    MessageRef,
    MessageRejected,
    NotFound,
    ProviderError,
    RateLimited,
    StreamingMode,
    TransportError,
    Unreachable,
)
from bridge_core.providers.console_render import ConsoleRenderer
from bridge_core.text import neutralise_mass_mentions, valid_text

__all__ = [
    "CONSOLE_CAPABILITIES",
    "FAULT_CLASSES",
    "ConsoleProvider",
    "ConsoleSettings",
    "FaultSpec",
    "register_providers",
]

CONSOLE_CAPABILITIES = Capabilities(
    edit=True,
    max_length=4000,
    length_unit=LengthUnit.CHARACTERS,
    threads=True,
    inbound=True,
    probe=True,
    streaming=StreamingMode.EDIT,
)

FAULT_CLASSES: dict[str, type[ProviderError]] = {
    cls.__name__: cls
    for cls in (
        RateLimited,
        NotFound,
        Forbidden,
        Unreachable,
        MessageRejected,
        TransportError,
        ProviderError,
    )
}


class FaultSpec(BaseModel):
    """A fault scripted in the settings: the next ``count`` sends to ``channel`` fail."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    channel: str
    """The channel id whose sends fail."""
    error: Literal[
        "RateLimited", "NotFound", "Forbidden", "Unreachable", "MessageRejected", "TransportError"
    ]
    """The core error the sends raise, as the platform's refusal would be read."""
    retry_after: float | None = Field(default=None, ge=0)
    """Seconds a ``RateLimited`` asks the sender to wait. Not set: the sender backs off on its
    own."""
    message: str = "scripted fault"
    """The error's message, as the console output and the logs show it (the transcript records its
    class)."""
    count: int = Field(default=1, ge=1)
    """How many sends (posts or edits) to the channel fail in a row."""

    def build(self) -> ProviderError:
        if self.error == "RateLimited":
            return RateLimited(self.message, retry_after=self.retry_after)
        return FAULT_CLASSES[self.error](self.message)


class ConsoleSettings(BaseModel):
    """A console profile's ``settings`` table."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    transcript: Path | None = None
    """A JSON Lines file that gets one line per post, edit and failed send, flushed as it is
    written; appended to, never truncated. A relative path is relative to the config file's folder,
    as ``stores.ledger`` is. Not set: no transcript."""
    output: Literal["stdout", "stderr", "none"] = "stdout"
    """Where messages are drawn: ``stdout``, ``stderr``, or ``none`` (the transcript only). Move
    them off standard output when something else is written there. Control characters in what is
    drawn (an ``ESC]0;…`` title sequence, a colour code, C1 controls) are shown as visible symbols
    such as ``␛``, never sent to the terminal."""
    width: int | None = Field(default=None, ge=20)
    """Columns to wrap messages at (20 or more). Not set: the terminal's width, or 80 when the
    output is not a terminal."""
    color: bool | None = None
    """``true`` forces colour, ``false`` turns it off. Not set: colour only when the output is a
    terminal."""
    budget: BudgetSpec | None = None
    """Send limits to rehearse a platform's pacing in the terminal: a preset name (``"slack"``) or a
    table, as a profile's ``budget``, which still wins over it. Not set: unlimited."""
    faults: list[FaultSpec] = Field(default_factory=list)
    """Failures to script: each makes the next ``count`` sends to a channel raise the error it
    names, to rehearse how the sender and the ledger react."""
    blocked: list[str] = Field(default_factory=list)
    """Channel ids the bot has no access to: posts and edits there raise ``Forbidden`` and the probe
    answers no, as when a bot is removed from a channel."""
    inbound: Literal["-", "stdin"] | Path | None = None
    """Where people's messages come from: ``-`` or ``stdin`` for standard input, else a file read
    line by line (a relative path is relative to the config file's folder). A line ``#other text``
    goes to channel ``other``; a JSON object line (``id``, ``text``, and optionally ``channel``,
    ``author``, ``thread``) carries its own message id. Not set: no inbound."""
    inbound_channel: str = "console"
    """The channel id that inbound lines go to unless they name their own; match a channel's
    ``channel_id`` so its agent answers them."""
    inbound_author: str = "you"
    """The author id of inbound lines that do not name their own."""


class ConsoleProvider(ChatProvider):
    """Posts to the terminal; see the module docstring for the transcript and faults."""

    name = "console"
    capabilities = CONSOLE_CAPABILITIES

    def __init__(
        self,
        settings: ConsoleSettings | None = None,
        *,
        profile: str = "console",
        output: TextIO | None = None,
        stdin: TextIO | None = None,
        run_prefix: str | None = None,
    ) -> None:
        self.settings = settings or ConsoleSettings()
        self.profile = profile
        self.run_prefix = run_prefix or secrets.token_hex(4)
        self._counter = 0
        self._inbound_counter = 0
        if output is None and self.settings.output != "none":
            output = sys.stdout if self.settings.output == "stdout" else sys.stderr
        self._renderer = ConsoleRenderer(
            output, width=self.settings.width, color=self.settings.color
        )
        self._stdin = stdin
        self._faults: dict[str, deque[ProviderError]] = {}
        for spec in self.settings.faults:
            for _ in range(spec.count):
                self.script_fault(spec.channel, spec.build())
        self._blocked: set[str] = set(self.settings.blocked)
        self._messages: dict[str, tuple[MessageRef, str, int]] = {}  # id -> (ref, text, edits)
        self._transcript: IO[str] | None = None
        if self.settings.transcript is not None:
            self.settings.transcript.parent.mkdir(parents=True, exist_ok=True)
            # a platform keeps its messages across a restart of the bot: so does the console,
            # from its transcript (a restarted gateway edits what the one before it posted)
            self._messages.update(_messages_of(self.settings.transcript))
            self._transcript = _open_transcript(self.settings.transcript)
        self._start: float | None = None
        self._closed = False
        try:
            self._start = anyio.current_time()
        except RuntimeError:  # sniffio.AsyncLibraryNotFoundError
            pass  # built outside an event loop: the clock starts at the first call

    # ------------------------------------------------------------------ scripting

    def script_fault(self, channel: str, error: ProviderError) -> None:
        """Make the next send (post or edit) to ``channel`` raise ``error``; faults queue up."""
        if not isinstance(error, ProviderError):
            raise TypeError(f"script_fault takes a ProviderError, got {type(error).__name__}")
        self._faults.setdefault(channel, deque()).append(error)

    def pending_faults(self, channel: str) -> int:
        return len(self._faults.get(channel, ()))

    def block(self, channel: str) -> None:
        """The bot loses access: posts and edits raise ``Forbidden``, ``probe`` says False."""
        self._blocked.add(channel)

    def unblock(self, channel: str) -> None:
        self._blocked.discard(channel)

    def text_of(self, message_id: str) -> str:
        """The current text of a message this provider posted (for tests and the demo)."""
        try:
            return self._messages[message_id][1]
        except KeyError:
            raise NotFound(f"no console message {message_id!r}") from None

    @property
    def message_count(self) -> int:
        return len(self._messages)

    # ------------------------------------------------------------------ the contract

    def escape(self, text: str) -> str:
        return neutralise_mass_mentions(text)

    async def post(self, channel: str, text: str, *, thread: str | None = None) -> MessageRef:
        t = self._elapsed()
        self._check_usable()
        try:
            self._raise_scripted(channel)
            if channel in self._blocked:
                raise Forbidden(f"the console bot has no access to #{channel}")
            self._check_length(text)
        except ProviderError as exc:
            self._fail("post", channel, thread, None, text, exc, t)
            raise
        self._counter += 1
        ref = MessageRef(
            channel=channel, message_id=f"{self.run_prefix}-{self._counter}", thread=thread
        )
        self._messages[ref.message_id] = (ref, text, 0)
        self._record(t, "post", channel, thread, ref.message_id, text)
        self._renderer.post(ref, text, t=t)
        return ref

    async def edit(self, ref: MessageRef, text: str) -> MessageRef:
        t = self._elapsed()
        self._check_usable()
        try:
            self._raise_scripted(ref.channel)
            if ref.channel in self._blocked:
                raise Forbidden(f"the console bot has no access to #{ref.channel}")
            known = self._messages.get(ref.message_id)
            if known is None or known[0].channel != ref.channel:
                raise NotFound(f"no console message {ref.message_id!r} in #{ref.channel}")
            self._check_length(text)
        except ProviderError as exc:
            self._fail("edit", ref.channel, ref.thread, ref.message_id, text, exc, t)
            raise
        stored_ref, _, edits = known
        self._messages[ref.message_id] = (stored_ref, text, edits + 1)
        self._record(t, "edit", ref.channel, stored_ref.thread, ref.message_id, text)
        self._renderer.edit(stored_ref, text, t=t, edits=edits + 1)
        return stored_ref

    async def probe(self, channel: str) -> bool | None:
        self._elapsed()
        return channel not in self._blocked

    async def receive(self, sink: InboundSink) -> None:
        """Hand each line of the inbound source to ``sink``; return at its end."""
        source = self.settings.inbound
        if source is None:
            return
        self._elapsed()
        if source in ("-", "stdin"):
            stream = self._stdin or sys.stdin
            # Bytes decoded here, not by the stream: a terminal or pipe that sends a byte that is
            # not UTF-8 must give a U+FFFD, not a UnicodeDecodeError that ends inbound.
            raw = getattr(stream, "buffer", None)
            read = raw.readline if raw is not None else stream.readline
            while True:
                # abandon_on_cancel: a read blocked on a terminal must not hold up shutdown
                line = await anyio.to_thread.run_sync(read, abandon_on_cancel=True)
                if not line:
                    return
                if isinstance(line, bytes):
                    line = line.decode("utf-8", "replace")
                await self._inbound_line(line, sink)
        try:
            file = await anyio.open_file(source, encoding="utf-8", errors="replace")
        except OSError as exc:
            raise Unreachable(
                f"console inbound file {str(source)!r} cannot be read: {exc}"
            ) from exc
        async with file:
            async for line in file:
                await self._inbound_line(line, sink)

    async def aclose(self) -> None:
        self.close()

    def close(self) -> None:
        """Close the transcript; later sends raise ``Unreachable``."""
        if self._transcript is not None and not self._closed:
            self._transcript.close()
        self._closed = True

    # ------------------------------------------------------------------ helpers

    def _elapsed(self) -> float:
        now = anyio.current_time()
        if self._start is None:
            self._start = now
        return round(now - self._start, 6)

    def _check_usable(self) -> None:
        if self._closed:
            raise Unreachable("the console provider is closed")

    def _check_length(self, text: str) -> None:
        if len(text) > self.capabilities.max_length:
            raise MessageRejected(
                f"message of {len(text)} characters exceeds the console's max_length "
                f"{self.capabilities.max_length}; chunk it with bridge_core.text.prepare first"
            )

    def _raise_scripted(self, channel: str) -> None:
        queue = self._faults.get(channel)
        if queue:
            raise queue.popleft()

    async def _inbound_line(self, line: str, sink: InboundSink) -> None:
        text = line.rstrip("\r\n")
        if not text.strip():
            return
        channel = self.settings.inbound_channel
        author = self.settings.inbound_author
        self._inbound_counter += 1
        message_id = f"{self.run_prefix}-in{self._inbound_counter}"
        thread: str | None = None
        if text.startswith("{"):
            # A JSON object line carries its own platform message id (and optionally channel,
            # author, thread), as a platform replaying one message to several gateways would.
            try:
                data = json.loads(text)
                message_id = str(data["id"])
                text = str(data["text"])
            except (ValueError, KeyError, TypeError, RecursionError):
                data = None
            if isinstance(data, dict):
                channel = str(data.get("channel") or channel)
                author = str(data.get("author") or author)
                thread = str(data["thread"]) if data.get("thread") else None
        elif text.startswith("#") and " " in text:
            target, rest = text[1:].split(" ", 1)
            if target:
                channel, text = target, rest
        message = InboundMessage(
            message_id=valid_text(message_id),
            channel=valid_text(channel),
            author=valid_text(author),
            text=valid_text(text),
            at=time.time(),
            thread=valid_text(thread) if thread is not None else None,
            platform="console",
            profile=self.profile,
        )
        self._renderer.inbound(message, t=self._elapsed())
        await sink(message)

    def _fail(
        self,
        op: str,
        channel: str,
        thread: str | None,
        message_id: str | None,
        text: str,
        error: ProviderError,
        t: float,
    ) -> None:
        retry_after = error.retry_after if isinstance(error, RateLimited) else None
        self._record(
            t,
            "error",
            channel,
            thread,
            message_id,
            text,
            error=type(error).__name__,
            retry_after=retry_after,
            failed_op=op,
        )
        self._renderer.error(
            op=op, channel=channel, thread=thread, message_id=message_id, error=error, t=t
        )

    def _record(
        self,
        t: float,
        op: str,
        channel: str,
        thread: str | None,
        message_id: str | None,
        text: str,
        *,
        error: str | None = None,
        retry_after: float | None = None,
        failed_op: str | None = None,
    ) -> None:
        if self._transcript is None:
            return
        line: dict[str, Any] = {
            "t": t,
            "at": time.time(),
            "op": op,
            "channel": channel,
            "thread": thread,
            "message_id": message_id,
            "text": text,
            "error": error,
            "retry_after": retry_after,
        }
        if failed_op is not None:
            line["failed_op"] = failed_op
        record = valid_text(json.dumps(line, ensure_ascii=False))
        # json.dumps escapes C0 controls but writes DEL and C1 raw: `cat` of the transcript must
        # not send them to a terminal either.
        record = _RAW_CONTROLS.sub(lambda m: f"\\u{ord(m.group()):04x}", record)
        self._transcript.write(record + "\n")
        self._transcript.flush()


_RAW_CONTROLS = re.compile("[\x7f-\x9f]")


def _messages_of(path: Path) -> dict[str, tuple[MessageRef, str, int]]:
    """The messages an earlier run's transcript records, with their last text (lines a kill
    cut short, or that are not a console's records, are skipped)."""
    messages: dict[str, tuple[MessageRef, str, int]] = {}
    if not path.exists():
        return messages
    with path.open(encoding="utf-8", errors="replace") as file:
        for line in file:
            try:
                record = json.loads(line)
                op, message_id, text = record["op"], record["message_id"], record["text"]
            except (ValueError, KeyError, TypeError):
                continue
            if op == "post" and isinstance(message_id, str):
                ref = MessageRef(str(record["channel"]), message_id, record.get("thread"))
                messages[message_id] = (ref, str(text), 0)
            elif op == "edit" and message_id in messages:
                ref, _, edits = messages[message_id]
                messages[message_id] = (ref, str(text), edits + 1)
    return messages


def _open_transcript(path: Path) -> IO[str]:
    """Open the transcript for appending, on a fresh line. A process killed while writing a
    record can leave it cut short (Linux stops a write at a page boundary when the process is
    killed); without the newline, this run's first record would be glued to that fragment and
    neither would read as JSON."""
    transcript = path.open("a", encoding="utf-8")
    if transcript.tell() > 0:
        with path.open("rb") as existing:
            existing.seek(-1, os.SEEK_END)
            if existing.read(1) != b"\n":
                transcript.write("\n")
                transcript.flush()
    return transcript


def _build(settings: ConsoleSettings, context: ProviderContext) -> ConsoleProvider:
    return ConsoleProvider(settings, profile=context.profile)


@hookimpl
def register_providers(register: Any) -> None:
    register(
        ProviderType(
            name="console",
            capabilities=CONSOLE_CAPABILITIES,
            budget=UNLIMITED_BUDGET,
            settings_model=ConsoleSettings,
            factory=_build,
            description="prints messages in the terminal and writes a JSON Lines transcript",
        )
    )
