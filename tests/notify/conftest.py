"""A channel on virtual time (the console provider, a real sender and a real notifier), and a
fake sender that answers with deliveries, deleted messages and refusals."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Callable, Hashable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import anyio
import pytest
from bridge_slack import SLACK_BUDGET

from bridge_core.notify import Notifier, NotifyConfig
from bridge_core.provider import Capabilities, MessageRef, MessageRejected, NotFound, SendBudget
from bridge_core.providers.console import ConsoleProvider, ConsoleSettings
from bridge_core.sending import ChannelSender
from bridge_core.testing.budget import TranscriptEntry, read_transcript
from bridge_core.testing.clock import anyio_backend

__all__ = ["anyio_backend"]

CHANNEL = "fleet"


@dataclass
class Channel:
    provider: ConsoleProvider
    sender: ChannelSender
    notifier: Notifier
    transcript: Path
    budget: SendBudget
    waits: dict[str, float]

    def entries(self) -> list[TranscriptEntry]:
        if not self.transcript.exists():
            return []
        return read_transcript(self.transcript)

    async def until_idle(self, limit: float = 3600.0) -> None:
        """Let virtual time run until nothing is held or owed (at most ``limit`` seconds)."""
        with anyio.fail_after(limit):
            # Polling costs nothing on the virtual clock and needs no hook in the code under test.
            while not (self.notifier.idle and self.sender.idle):  # noqa: ASYNC110
                await anyio.sleep(0.5)


ChannelFactory = Callable[..., AbstractAsyncContextManager[Channel]]


class RefusingConsole(ConsoleProvider):
    """A console whose platform refuses (``MessageRejected``) every post or edit whose text
    contains one of ``refusing``, as a platform refuses a message it finds too long or malformed.
    The refusal is scripted just before the call, so it shows in the transcript as an error."""

    refusing: set[str]
    missing: set[str]  # a post whose text holds one is answered NotFound (no such channel)

    def _refuse(self, channel: str, text: str) -> None:
        for word in self.refusing:
            if word in text:
                self.script_fault(channel, MessageRejected(f"the platform refused {word!r}"))
                return

    async def post(self, channel: str, text: str, *, thread: str | None = None) -> MessageRef:
        if any(word in text for word in self.missing):
            self.script_fault(channel, NotFound("no such channel (HTTP 404)"))
        self._refuse(channel, text)
        return await super().post(channel, text, thread=thread)

    async def edit(self, ref: MessageRef, text: str) -> MessageRef:
        self._refuse(ref.channel, text)
        return await super().edit(ref, text)


@pytest.fixture
def open_channel(tmp_path: Path) -> ChannelFactory:
    counter = 0

    @asynccontextmanager
    async def factory(
        *,
        budget: SendBudget = SLACK_BUDGET,
        capabilities: Capabilities | None = None,
        config: NotifyConfig | None = None,
        seed: int = 7,
        refusing: set[str] | None = None,
        missing: set[str] | None = None,
        **caps: Any,
    ) -> AsyncIterator[Channel]:
        nonlocal counter
        counter += 1
        transcript = tmp_path / f"transcript-{counter}.jsonl"
        settings = ConsoleSettings(transcript=transcript, output="none")
        provider = RefusingConsole(settings, run_prefix=f"r{counter}")
        provider.refusing = refusing if refusing is not None else set()
        provider.missing = missing if missing is not None else set()
        if capabilities is not None or caps:
            provider.capabilities = replace(capabilities or provider.capabilities, **caps)
        sender = ChannelSender(provider, channel=CHANNEL, budget=budget, random=random.Random(seed))
        waits: dict[str, float] = {}
        notifier = Notifier(
            CHANNEL,
            sender,
            capabilities=provider.capabilities,
            config=config,
            escape=provider.escape,
            on_terminal_delivered=waits.__setitem__,
        )
        async with anyio.create_task_group() as group:
            group.start_soon(sender.run)
            group.start_soon(notifier.run)
            yield Channel(provider, sender, notifier, transcript, budget, waits)
            group.cancel_scope.cancel()
        await provider.aclose()

    return factory


class AnsweringSender:
    """Keeps one piece of work per key and records each submission; ``answer`` renders the
    queued work and reports an outcome: mostly a delivery, sometimes a deleted message or a
    refusal (drawn from its own seed, so two notifiers that submit alike get alike answers)."""

    def __init__(self, seed: int) -> None:
        self.queue: dict[Hashable, tuple[Callable[[], str | None], Any, Any]] = {}
        self.submissions: list[tuple[Any, ...]] = []
        self.texts: list[str | None] = []
        self.random = random.Random(seed)
        self.sent = 0

    def submit(self, key: Hashable, **work: Any) -> bool:
        _, name, serial = key  # type: ignore[misc]  # the outbox's (id, name, serial) key
        self.submissions.append((name, serial, work["priority"], work["edit"] is not None))
        replaced = key in self.queue
        self.queue[key] = (work["text"], work["edit"], work["on_outcome"])
        return replaced

    def answer(self, share: float) -> None:
        """Answer about ``share`` of the queued work, in line order."""
        for key, (text, edit, on_outcome) in list(self.queue.items()):
            if self.random.random() >= share:
                continue
            del self.queue[key]
            rendered = text()
            self.texts.append(rendered)
            result: Any = None
            if rendered is not None:
                roll = self.random.random()
                if roll < 0.1:
                    result = NotFound("deleted")
                elif roll < 0.2:
                    result = MessageRejected("refused")
                else:
                    self.sent += 1
                    result = edit if edit is not None else MessageRef("c", f"m{self.sent}")
            on_outcome(result)
