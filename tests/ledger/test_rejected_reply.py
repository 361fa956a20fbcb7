"""A reply the platform refuses (``MessageRejected``) is abandoned at once with the platform's
reason, and the channel's next reply goes out: the ledger over a real per-channel sender and the
console provider, on virtual time."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from bridge_slack import SLACK_BUDGET

from bridge_core.ledger import (
    Delivery,
    DeliveryLedger,
    MemoryBackend,
    MemoryLedgerStore,
    Reply,
    State,
)
from bridge_core.provider import MessageRef, MessageRejected
from bridge_core.providers.console import ConsoleProvider, ConsoleSettings
from bridge_core.sending import ChannelSender, Post, Priority
from bridge_core.testing.budget import read_transcript
from bridge_core.testing.clock import anyio_backend

__all__ = ["anyio_backend"]

pytestmark = pytest.mark.anyio

BASE = 1_800_000_000.0


def reply(answers: str, text: str) -> Reply:
    return Reply.answering(
        profile="X", platform="console", channel="ops", answers=answers, text=text
    )


async def test_a_rejected_reply_is_abandoned_and_the_next_reply_is_delivered(
    tmp_path: Path,
) -> None:
    transcript = tmp_path / "t.jsonl"
    provider = ConsoleProvider(ConsoleSettings(transcript=transcript, output="none"))
    sender = ChannelSender(provider, channel="ops", budget=SLACK_BUDGET)

    async def deliver(delivery: Delivery) -> MessageRef:
        return await sender.send(Post(delivery.text), priority=Priority.TERMINAL)

    store = MemoryLedgerStore(MemoryBackend(), owner="host|p1|0")
    await store.open()
    ledger = DeliveryLedger(
        store,
        deliver=deliver,
        profiles={"X"},
        connected=lambda platform: True,
        clock=lambda: BASE + anyio.current_time(),
    )
    async with anyio.create_task_group() as group:
        group.start_soon(sender.run)
        await group.start(ledger.run)
        provider.script_fault("ops", MessageRejected("Slack refused the message: msg_too_long"))
        refused = await ledger.submit(reply("m1", "a reply the platform refuses"))
        delivered = await ledger.submit(reply("m2", "the next reply"))
        await anyio.sleep(3 * 3600)  # long past every resend timer
        assert sender.healthy and sender.paused_until is None
        group.cancel_scope.cancel()
    await provider.aclose()
    assert refused.state is State.ABANDONED and refused.attempts == 1
    assert refused.last_error == "MessageRejected: Slack refused the message: msg_too_long"
    assert delivered.state is State.DELIVERED
    later = await store.get(refused.id)
    assert later is not None and later.state is State.ABANDONED, "never retried"
    assert [(e.op, e.text) for e in read_transcript(transcript)] == [
        ("error", "a reply the platform refuses"),
        ("post", "the next reply"),
    ]
