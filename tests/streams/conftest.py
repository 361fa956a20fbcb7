"""A channel on virtual time for streamed replies: the console provider, a real sender, the
delivery ledger (memory store, claim at the turn) delivering through ``StreamedReplies``."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import anyio
import pytest
from bridge_slack import SLACK_BUDGET

from bridge_core.ledger import DeliveryLedger, MemoryLedgerStore, Obligation, Reply
from bridge_core.ledger.kv import MemoryKeyValueStore
from bridge_core.provider import Capabilities, SendBudget
from bridge_core.providers.console import ConsoleProvider, ConsoleSettings
from bridge_core.runtime.streaming import StreamedReplies, answer_streamed
from bridge_core.sending import ChannelSender
from bridge_core.testing.budget import TranscriptEntry, read_transcript
from bridge_core.testing.clock import anyio_backend

__all__ = ["anyio_backend"]

CHANNEL = "answers"


async def paced(deltas: Sequence[tuple[float, str]]) -> AsyncIterator[str]:
    """Yield each ``(t, text)`` at virtual time ``t``."""
    for t, text in deltas:
        await anyio.sleep_until(t)
        yield text


def evenly(count: int, *, over: float, start: float = 0.0) -> list[tuple[float, str]]:
    """``count`` deltas of 3 characters (a token or so) spread evenly from ``start`` to
    ``start + over`` (the last at the end)."""
    step = over / (count - 1)
    return [(start + i * step, f"{i % 100:02d} ") for i in range(count)]


@dataclass
class StreamChannel:
    provider: ConsoleProvider
    sender: ChannelSender
    replies: StreamedReplies
    ledger: DeliveryLedger
    store: MemoryLedgerStore
    kv: MemoryKeyValueStore
    transcript: Path
    budget: SendBudget

    def entries(self) -> list[TranscriptEntry]:
        return read_transcript(self.transcript) if self.transcript.exists() else []

    def reply(self, name: str) -> Reply:
        return Reply(
            obligation_id=f"ob-{name}", profile="p", platform="console", channel=CHANNEL, text=""
        )

    async def stream(self, name: str, deltas: Sequence[tuple[float, str]]) -> Obligation:
        return await answer_streamed(self.replies, self.ledger, self.reply(name), paced(deltas))

    async def until_idle(self, limit: float = 3600.0) -> None:
        with anyio.fail_after(limit):
            while not self.sender.idle:  # noqa: ASYNC110 - free on the virtual clock
                await anyio.sleep(0.5)


ChannelFactory = Callable[..., AbstractAsyncContextManager[StreamChannel]]


@pytest.fixture
def open_stream_channel(tmp_path: Path) -> ChannelFactory:
    counter = 0

    @asynccontextmanager
    async def factory(
        *,
        budget: SendBudget = SLACK_BUDGET,
        capabilities: Capabilities | None = None,
        **caps: Any,
    ) -> AsyncIterator[StreamChannel]:
        nonlocal counter
        counter += 1
        transcript = tmp_path / f"transcript-{counter}.jsonl"
        provider = ConsoleProvider(
            ConsoleSettings(transcript=transcript, output="none"), run_prefix=f"s{counter}"
        )
        if capabilities is not None or caps:
            provider.capabilities = replace(capabilities or provider.capabilities, **caps)
        sender = ChannelSender(provider, channel=CHANNEL, budget=budget, random=random.Random(3))
        kv = MemoryKeyValueStore()
        replies = StreamedReplies(sender, lambda: provider, kv=kv)
        store = MemoryLedgerStore()
        await store.open()
        ledger = DeliveryLedger(
            store,
            deliver=replies.deliver,
            profiles={"p"},
            clock=lambda: 1_800_000_000.0 + anyio.current_time(),
            deliver_begins=True,
        )
        # as the gateway wires them: a send that succeeds gives parked replies their attempt
        sender.health.on_proven(lambda: ledger.channel_proven("p", CHANNEL))
        async with anyio.create_task_group() as group:
            group.start_soon(sender.run)
            await group.start(ledger.run)
            yield StreamChannel(provider, sender, replies, ledger, store, kv, transcript, budget)
            group.cancel_scope.cancel()
        await provider.aclose()

    return factory
