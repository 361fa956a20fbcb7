"""A channel on virtual time: the console provider, a real sender and a real notifier."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import anyio
import pytest
from bridge_slack import SLACK_BUDGET

from bridge_core.notify import Notifier, NotifyConfig
from bridge_core.provider import Capabilities, MessageRef, MessageRejected, SendBudget
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

    def _refuse(self, channel: str, text: str) -> None:
        for word in self.refusing:
            if word in text:
                self.script_fault(channel, MessageRejected(f"the platform refused {word!r}"))
                return

    async def post(self, channel: str, text: str, *, thread: str | None = None) -> MessageRef:
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
        **caps: Any,
    ) -> AsyncIterator[Channel]:
        nonlocal counter
        counter += 1
        transcript = tmp_path / f"transcript-{counter}.jsonl"
        settings = ConsoleSettings(transcript=transcript, output="none")
        provider = RefusingConsole(settings, run_prefix=f"r{counter}")
        provider.refusing = refusing if refusing is not None else set()
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
