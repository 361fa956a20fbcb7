"""Work given to a sender after its ``run()`` ended is answered at once with ``SenderClosed``
(ADR 0013): no drain loop is left to take it, so queueing it would leave ``send()`` waiting and
``on_outcome`` uncalled for ever. A later ``run()`` takes work again."""

from __future__ import annotations

import anyio
import pytest
from bridge_slack import SLACK_BUDGET

from bridge_core.provider import MessageRef
from bridge_core.providers.console import ConsoleProvider
from bridge_core.sending import ChannelSender, Post, SenderClosed
from bridge_core.sending.queue import Outcome

pytestmark = pytest.mark.anyio


async def _stopped(console: ConsoleProvider) -> ChannelSender:
    sender = ChannelSender(console, channel="c", budget=SLACK_BUDGET)
    async with sender:
        await sender.send(Post("before the stop"))
    return sender


async def test_send_after_the_sender_stopped_raises_at_once(console: ConsoleProvider) -> None:
    sender = await _stopped(console)
    started = anyio.current_time()
    with anyio.fail_after(3600), pytest.raises(SenderClosed):
        await sender.send(Post("reply"))
    assert anyio.current_time() == started


async def test_submit_after_the_sender_stopped_is_answered(console: ConsoleProvider) -> None:
    sender = await _stopped(console)
    outcomes: list[Outcome] = []
    assert sender.submit("k", text="hello", on_outcome=outcomes.append) is False
    assert len(outcomes) == 1 and isinstance(outcomes[0], SenderClosed)
    assert sender.queued == 0 and sender.idle


async def test_a_later_run_takes_work_again(console: ConsoleProvider) -> None:
    sender = await _stopped(console)
    outcomes: list[Outcome] = []
    async with sender:
        sender.submit("k", text="hello", on_outcome=outcomes.append)
        assert isinstance(await sender.send(Post("reply")), MessageRef)
        await anyio.sleep(5)
    assert len(outcomes) == 1 and isinstance(outcomes[0], MessageRef)
