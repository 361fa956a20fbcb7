"""A ``RateLimited`` whose wait is not usable backs the channel off by default (ADR 0027).

``inf`` used to pause the channel forever (it never sent again); ``nan`` compared False and so
fell through to the back-off by luck; a huge finite wait paused it for years. Each now backs off
1 to 2 s (the first failure), then the work goes out, with no busy loop.
"""

from __future__ import annotations

import math
import random

import anyio
import pytest
from bridge_slack import SLACK_BUDGET

from bridge_core.provider import MessageRef, RateLimited
from bridge_core.sending import BACKOFF_MIN, ChannelSender, Post
from bridge_core.testing.clock import run_virtual

from .test_containment import ScriptedProvider


@pytest.mark.parametrize("wait", [math.inf, -math.inf, math.nan, 1e309, -3.0, 1e12])
def test_an_unusable_wait_backs_the_channel_off_then_sends(wait: float) -> None:
    async def main() -> None:
        provider = ScriptedProvider()

        def limited() -> None:
            raise RateLimited("slow", retry_after=wait)

        provider.faults.append(limited)
        calls: list[float] = []
        inner = provider._call

        def counted(text: str) -> MessageRef:
            calls.append(anyio.current_time())
            return inner(text)

        provider._call = counted  # type: ignore[method-assign]
        async with ChannelSender(
            provider, channel="c", budget=SLACK_BUDGET, random=random.Random(1)
        ) as sender:
            with anyio.fail_after(120):
                ref = await sender.send(Post("x"))
            assert isinstance(ref, MessageRef)
            assert sender.statistics().backoffs == 1 and sender.statistics().rate_limit_pauses == 1
        assert len(calls) == 2, calls
        assert BACKOFF_MIN <= calls[1] - calls[0] <= 2 * BACKOFF_MIN + 0.05

    run_virtual(main)


def test_a_send_whose_caller_left_mid_call_is_not_sent_again_after_a_429() -> None:
    async def main() -> None:
        provider = ScriptedProvider()

        def limited() -> None:
            raise RateLimited("slow", retry_after=3)

        provider.faults.append(limited)
        slow = provider.post

        async def slow_post(channel: str, text: str, *, thread: str | None = None) -> MessageRef:
            await anyio.sleep(5)  # in flight when its caller gives up
            return await slow(channel, text, thread=thread)

        provider.post = slow_post  # type: ignore[method-assign]
        async with ChannelSender(
            provider, channel="c", budget=SLACK_BUDGET, random=random.Random(1)
        ) as sender:
            with anyio.move_on_after(1):
                await sender.send(Post("A"))
            await anyio.sleep(30)  # past the pause: a requeued A would have gone out
            assert provider.delivered == []
            assert await sender.send(Post("B")) == MessageRef("c", "m1")  # the channel serves on
        assert provider.delivered == ["B"]

    run_virtual(main)
