"""``Post(begin=...)`` and ``Edit(begin=...)``: the caller's last word once its send's slot in
the budget is free (the delivery ledger claims its reply there, ADR 0028). Virtual time, through
the console transcript."""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import pytest

from bridge_core.provider import RateLimited, SendBudget
from bridge_core.providers.console import ConsoleProvider
from bridge_core.sending import ChannelSender, Edit, Post
from bridge_core.testing.budget import read_transcript

pytestmark = pytest.mark.anyio
C = "chan"
ONE_A_SECOND = SendBudget(burst=1, per_second=1.0, edit_spacing=0.0)


class Refused(Exception):
    pass


def sent(tmp_path: Path) -> list[tuple[float, str, str]]:
    return [(e.t, e.op, e.text) for e in read_transcript(tmp_path / "t.jsonl")]


async def test_a_post_begins_only_once_its_slot_is_free(
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
    # each post began when the budget let it go, not while it waited for its slot (ADR 0028):
    # a crash during the wait leaves its reply unclaimed, so it is resent clean
    assert {name: began[name] for _, _, name in posted} == {name: t for t, _, name in posted}


async def test_a_slow_begin_does_not_squeeze_the_sends_together(
    tmp_path: Path, console: ConsoleProvider
) -> None:
    """The send is reserved after ``begin``: a begin that takes a commit's time (7 ms here, the
    overdraw ADR 0025 saw when the grant came first) delays its own send, never the spacing."""

    async def slow_begin() -> None:
        await anyio.sleep(0.007)

    async with ChannelSender(console, channel=C, budget=ONE_A_SECOND) as sender:
        async with anyio.create_task_group() as group:
            for name in ("a", "b", "c", "d"):
                group.start_soon(sender.send, Post(name, begin=slow_begin))
    times = [t for t, _, _ in sent(tmp_path)]
    assert len(times) == 4
    assert all(later - earlier >= 1.0 - 1e-9 for earlier, later in itertools.pairwise(times))


class TakenDuringTheClaim:
    """A shared gate whose slot another gateway takes while this sender claims: ``peek`` says
    go, the ``reserve`` that follows says wait once."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, float]] = []
        self.refused = False

    async def peek(self, now: float, *, priority: int) -> float:
        self.calls.append(("peek", now))
        return 0.0

    async def reserve(self, now: float, *, priority: int) -> float:
        self.calls.append(("reserve", now))
        if not self.refused:
            self.refused = True
            return 0.5
        return 0.0


async def test_a_grant_taken_during_the_claim_is_asked_for_again(
    tmp_path: Path, console: ConsoleProvider
) -> None:
    claims: list[float] = []

    async def begin() -> None:
        claims.append(anyio.current_time())

    gate = TakenDuringTheClaim()
    async with ChannelSender(console, channel=C, budget=ONE_A_SECOND, gate=gate) as sender:
        await sender.send(Post("reply", begin=begin))
    assert gate.calls == [("peek", 0.0), ("reserve", 0.0), ("peek", 0.5), ("reserve", 0.5)]
    assert claims == [0.0, 0.5]  # begin is idempotent: the ledger's second call claims nothing
    assert sent(tmp_path) == [(0.5, "post", "reply")]


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


async def test_an_edit_begins_only_once_its_slot_is_free_and_before_its_call(
    tmp_path: Path, console: ConsoleProvider
) -> None:
    # A streamed reply's final text is an edit of its partial message carrying the ledger's
    # claim: the sender used to make the edit without awaiting it (the ledger claimed late).
    began: list[tuple[float, int]] = []
    async with ChannelSender(console, channel=C, budget=ONE_A_SECOND) as sender:
        ref = await sender.send(Post("partial"))

        async def begin() -> None:
            began.append((anyio.current_time(), len(sent(tmp_path))))

        await sender.send(Edit(ref, "final", begin=begin))
    assert sent(tmp_path) == [(0.0, "post", "partial"), (1.0, "edit", "final")]
    assert began == [(1.0, 1)]  # when its slot came, with the edit not yet made


async def test_an_edit_whose_begin_raises_is_not_made(
    tmp_path: Path, console: ConsoleProvider
) -> None:
    async def refuse() -> None:
        raise Refused("claimed elsewhere")

    async with ChannelSender(console, channel=C, budget=ONE_A_SECOND) as sender:
        ref = await sender.send(Post("partial"))
        with pytest.raises(Refused, match="claimed elsewhere"):
            await sender.send(Edit(ref, "final", begin=refuse))
        assert sender.healthy
    assert sent(tmp_path) == [(0.0, "post", "partial")]
