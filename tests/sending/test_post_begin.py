"""``Post(begin=...)``: the caller's last word when its post reaches the head of the channel's
queue (the delivery ledger claims its reply there). Virtual time, through the console transcript."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import anyio
import pytest

from bridge_core.provider import RateLimited, SendBudget
from bridge_core.providers.console import ConsoleProvider, ConsoleSettings
from bridge_core.sending import ChannelSender, Post
from bridge_core.testing.budget import read_transcript

pytestmark = pytest.mark.anyio
C = "chan"
ONE_A_SECOND = SendBudget(burst=1, per_second=1.0, edit_spacing=0.0)


class Refused(Exception):
    pass


@pytest.fixture
async def console(tmp_path: Path) -> AsyncIterator[ConsoleProvider]:
    provider = ConsoleProvider(
        ConsoleSettings(transcript=tmp_path / "t.jsonl", output="none"), run_prefix="r"
    )
    yield provider
    await provider.aclose()


def sent(tmp_path: Path) -> list[tuple[float, str, str]]:
    return [(e.t, e.op, e.text) for e in read_transcript(tmp_path / "t.jsonl")]


async def test_only_the_head_of_the_queue_has_begun(
    tmp_path: Path, console: ConsoleProvider
) -> None:
    began: dict[str, float] = {}

    def beginning(name: str) -> Callable[[], Awaitable[None]]:
        async def begin() -> None:
            began.setdefault(name, anyio.current_time())

        return begin

    async with ChannelSender(console, channel=C, budget=ONE_A_SECOND) as sender:
        async with anyio.create_task_group() as group:
            for name in ("a", "b", "c"):
                group.start_soon(sender.send, Post(name, begin=beginning(name)))
    posted = sent(tmp_path)
    assert [t for t, _, _ in posted] == [0.0, 1.0, 2.0]  # one a second, in whatever order queued
    order = [name for _, _, name in posted]
    # each post began only once the one before it had gone out: never two begun and unsent
    assert began[order[0]] == 0.0
    assert began[order[1]] == posted[0][0] and began[order[2]] == posted[1][0]


async def test_a_begin_that_raises_sends_nothing_and_the_channel_goes_on(
    tmp_path: Path, console: ConsoleProvider
) -> None:
    async def refuse() -> None:
        raise Refused("claimed elsewhere")

    async with ChannelSender(console, channel=C, budget=ONE_A_SECOND) as sender:
        with pytest.raises(Refused, match="claimed elsewhere"):
            await sender.send(Post("not mine any more", begin=refuse))
        await sender.send(Post("the next reply"))
        assert sender.healthy
    # begin ran before the budget was asked, so the refused post spent none of it
    assert sent(tmp_path) == [(0.0, "post", "the next reply")]


async def test_begin_is_awaited_again_after_a_rate_limited_retry(
    tmp_path: Path, console: ConsoleProvider
) -> None:
    calls: list[float] = []

    async def begin() -> None:
        calls.append(anyio.current_time())

    async with ChannelSender(console, channel=C, budget=ONE_A_SECOND) as sender:
        console.script_fault(C, RateLimited(retry_after=5.0))
        await sender.send(Post("hello", begin=begin))
    assert calls == [0.0, 5.0]
    assert sent(tmp_path)[-1] == (5.0, "post", "hello")
