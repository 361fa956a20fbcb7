"""Slack's native streaming (``chat.startStream`` / ``appendStream`` / ``stopStream``) through
the real slack-sdk client against the fake Slack: every call paced by the core's sender and
counted at the platform, no SDK resend, the final text landing as the stream's stop."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from bridge_slack import CAPABILITIES, SlackProvider, SlackSettings
from bridge_slack.testing.fake_slack import FakeSlack

from bridge_core import StreamingMode
from bridge_core.ledger import DeliveryLedger, MemoryLedgerStore, Reply, State
from bridge_core.provider import SendBudget
from bridge_core.runtime.streaming import StreamedReplies, answer_streamed
from bridge_core.sending import ChannelSender
from bridge_core.streams import INTERRUPTED

pytestmark = pytest.mark.anyio

THREAD = "1700000000.000100"
BUDGET = SendBudget(burst=5, per_second=20.0, edit_spacing=0.05)
WORDS = [f"word{i} " for i in range(40)]


async def deltas() -> AsyncIterator[str]:
    for word in WORDS:
        await anyio.sleep(0.005)
        yield word


async def stream_one(settings: dict[str, Any], *, thread: str | None) -> tuple[SlackProvider, Any]:
    provider = SlackProvider(SlackSettings.model_validate(settings), profile="ops")
    sender = ChannelSender(provider, channel="C0GENERAL", budget=BUDGET, random=random.Random(1))
    replies = StreamedReplies(sender, lambda: provider)
    store = MemoryLedgerStore()
    await store.open()
    ledger = DeliveryLedger(store, deliver=replies.deliver, profiles={"ops"}, deliver_begins=True)
    reply = Reply(
        obligation_id="ob-1",
        profile="ops",
        platform="slack",
        channel="C0GENERAL",
        text="",
        thread=thread,
    )
    async with provider, anyio.create_task_group() as group:
        group.start_soon(sender.run)
        row = await answer_streamed(replies, ledger, reply, deltas())
        group.cancel_scope.cancel()
    return provider, row


def test_slack_declares_native_streaming() -> None:
    assert CAPABILITIES.streaming_mode is StreamingMode.NATIVE


async def test_a_reply_in_a_thread_streams_natively(
    slack_settings: dict[str, Any], fake_slack: FakeSlack
) -> None:
    _, row = await stream_one(slack_settings, thread=THREAD)
    full = "".join(WORDS)
    assert row.state is State.DELIVERED
    (message,) = fake_slack.messages.values()
    methods = [method for method, _ in message.stream]
    assert methods[0] == "chat.startStream" and methods[-1] == "chat.stopStream"
    assert set(methods[1:-1]) <= {"chat.appendStream"}
    assert methods.count("chat.startStream") == 1 and methods.count("chat.stopStream") == 1
    assert message.text == full and not message.streaming and message.thread_ts == THREAD
    # what the platform saw is what the sender sent: one request per call, nothing else
    assert fake_slack.count("chat.postMessage") == 0 and fake_slack.count("chat.update") == 0
    assert fake_slack.count("chat.startStream") == 1
    assert fake_slack.count("chat.appendStream") == methods.count("chat.appendStream")
    assert fake_slack.count("chat.stopStream") == 1
    assert "".join(text or "" for _, text in message.stream) == full
    assert row.delivered[0].message_id == message.ts


async def test_a_rate_limited_append_is_one_request_then_the_senders_own_retry(
    slack_settings: dict[str, Any], fake_slack: FakeSlack
) -> None:
    fake_slack.script("chat.appendStream", FakeSlack.rate_limited(retry_after=1))
    _, row = await stream_one(slack_settings, thread=THREAD)
    (message,) = fake_slack.messages.values()
    recorded = [m for m, _ in message.stream]
    # the refused append reached the platform once and was not recorded; no SDK resend
    assert fake_slack.count("chat.appendStream") == recorded.count("chat.appendStream") + 1
    assert message.text == "".join(WORDS) and row.state is State.DELIVERED


async def test_a_reply_outside_a_thread_streams_by_editing(
    slack_settings: dict[str, Any], fake_slack: FakeSlack
) -> None:
    _, row = await stream_one(slack_settings, thread=None)
    (message,) = fake_slack.messages.values()
    assert fake_slack.count("chat.startStream") == 0
    assert fake_slack.count("chat.postMessage") == 1 and fake_slack.count("chat.update") >= 1
    assert message.text == "".join(WORDS) and row.state is State.DELIVERED


@pytest.mark.parametrize("still_streaming", [True, False])
async def test_a_dead_posters_native_partial_is_marked_interrupted(
    slack_settings: dict[str, Any], fake_slack: FakeSlack, still_streaming: bool
) -> None:
    provider = SlackProvider(SlackSettings.model_validate(slack_settings), profile="ops")
    sender = ChannelSender(provider, channel="C0GENERAL", budget=BUDGET, random=random.Random(1))
    replies = StreamedReplies(sender, lambda: provider)
    async with provider, anyio.create_task_group() as group:
        group.start_soon(sender.run)
        ref = await provider.stream_start("C0GENERAL", "half an ans", thread=THREAD)
        if not still_streaming:  # Slack ended the dead poster's stream on its own
            await provider.stream_stop(ref, "")
        replies.mark_interrupted([ref])
        with anyio.fail_after(5):
            while INTERRUPTED not in fake_slack.message("C0GENERAL", ref.message_id).text:  # noqa: ASYNC110
                await anyio.sleep(0.01)
        group.cancel_scope.cancel()
    message = fake_slack.message("C0GENERAL", ref.message_id)
    assert not message.streaming
    if still_streaming:  # one request: the notice appended as the stream stops
        assert message.text == f"half an ans\n\n{INTERRUPTED}"
        assert fake_slack.count("chat.update") == 0
    else:  # the stop is refused (not streaming): then the text is replaced
        assert message.text == INTERRUPTED and fake_slack.count("chat.update") == 1
