"""``Post(begin=...)``: the caller's last word once the budget grants a post (the delivery
ledger claims its reply there). Virtual time, read through the console transcript."""

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


async def test_begin_runs_when_the_budget_grants_the_post_not_when_it_is_queued(
    tmp_path: Path, console: ConsoleProvider
) -> None:
    began: list[tuple[str, float]] = []

    def beginning(name: str) -> Callable[[], Awaitable[None]]:
        async def begin() -> None:
            began.append((name, anyio.current_time()))

        return begin

    async with ChannelSender(console, channel=C, budget=ONE_A_SECOND) as sender:
        async with anyio.create_task_group() as group:
            for name in ("a", "b", "c"):
                group.start_soon(sender.send, Post(name, begin=beginning(name)))
    # queued together (in whatever order the tasks ran); each began when its post went out
    assert [t for _, t in began] == [0.0, 1.0, 2.0]
    assert sent(tmp_path) == [(t, "post", name) for name, t in began]


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
    # the refused post's granted send went unused: the next one waited its turn
    assert sent(tmp_path) == [(1.0, "post", "the next reply")]


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
