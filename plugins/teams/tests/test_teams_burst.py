"""Seed scenario B (30 spawns in 2 s, 2 crash at 30 s, the rest done by 120 s) through the real
notifier, the real sender, the Teams provider and botframework-connector against FakeTeams.

Real I/O cannot run on a virtual clock, so time is compressed instead: every duration (the
notifier's hold and window, the budget's rate, windows and edit spacing, the fake's own per-channel
limit) is divided by ``K`` and the scenario runs in a few real seconds.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable

import anyio
import pytest
from bridge_teams import TeamsProvider, TeamsSettings

from bridge_core import TEAMS_BUDGET, ChatProvider, MessageRef, ProviderError, SendBudget, Window
from bridge_core.events import AgentFinished, AgentSpawned, Outcome
from bridge_core.notify import Notifier, NotifyConfig
from bridge_core.sending import ChannelSender
from bridge_core.testing.budget import TranscriptEntry, check_budget, check_edit_spacing
from bridge_core.testing.fake_teams import FakeTeams

pytestmark = pytest.mark.anyio

K = 20.0
# The sender reads the clock just before calling the provider; the wrapper reads it just after,
# with no await between, so only a thread switch can separate the two.
CLOCK_SLACK = 0.005


class Timed(ChatProvider):
    """The real provider, noting when each call left the sender (failed attempts included),
    so the budget is checked on the times the sender chose, free of network jitter."""

    def __init__(self, inner: ChatProvider) -> None:
        self.inner = inner
        self.name = inner.name
        self.capabilities = inner.capabilities
        self.entries: list[TranscriptEntry] = []

    def _note(self, at: float, op: str, channel: str, message_id: str | None) -> None:
        self.entries.append(TranscriptEntry(at, op, channel, message_id, ""))

    async def post(self, channel: str, text: str, *, thread: str | None = None) -> MessageRef:
        at = anyio.current_time()
        try:
            ref = await self.inner.post(channel, text, thread=thread)
        except ProviderError:
            self._note(at, "error", channel, None)
            raise
        self._note(at, "post", channel, ref.message_id)
        return ref

    async def edit(self, ref: MessageRef, text: str) -> MessageRef:
        at = anyio.current_time()
        try:
            edited = await self.inner.edit(ref, text)
        except ProviderError:
            self._note(at, "error", ref.channel, ref.message_id)
            raise
        self._note(at, "edit", ref.channel, ref.message_id)
        return edited

    def escape(self, text: str) -> str:
        return self.inner.escape(text)


def compress(budget: SendBudget, k: float) -> SendBudget:
    return SendBudget(
        burst=budget.burst,
        per_second=budget.per_second * k,
        windows=tuple(Window(w.limit, w.seconds / k) for w in budget.windows),
        edit_spacing=budget.edit_spacing / k,
    )


async def test_scenario_b_stays_within_teams_budget(
    fake: FakeTeams, make_settings: Callable[..., TeamsSettings], channel: str
) -> None:
    # Teams' per-conversation windows (7/1 s, 8/2 s, 60/30 s, 1800/h), compressed.
    fake.windows = tuple((limit, seconds / K) for limit, seconds in fake.windows)
    budget = compress(TEAMS_BUDGET, K)
    config = NotifyConfig(hold=2.0 / K, window=10.0 / K, forget_after=600.0 / K)
    provider = TeamsProvider(make_settings(fake), profile="burst")
    timed = Timed(provider)
    sender = ChannelSender(timed, channel=channel, budget=budget, random=random.Random(1))
    delivered: dict[str, float] = {}
    notifier = Notifier(
        channel,
        sender,
        capabilities=provider.capabilities,
        config=config,
        escape=provider.escape,
        on_terminal_delivered=delivered.__setitem__,
    )
    start = anyio.current_time()
    async with anyio.create_task_group() as group:
        group.start_soon(sender.run)
        group.start_soon(notifier.run)
        for i in range(30):
            await anyio.sleep_until(start + i * 0.06 / K)
            notifier.handle(AgentSpawned(f"b{i:02}", "w1"))
        await anyio.sleep_until(start + 30.0 / K)
        for crashed in ("b07", "b19"):
            notifier.handle(AgentFinished(crashed, "w1", outcome=Outcome.CRASHED, turns=3))
        rest = [f"b{i:02}" for i in range(30) if i not in (7, 19)]
        for n, name in enumerate(rest):
            await anyio.sleep_until(start + (31.0 + n * 3.0) / K)
            notifier.handle(AgentFinished(name, "w1", outcome=Outcome.DONE, cost=0.1))
        with anyio.fail_after(30):
            while not (notifier.idle and sender.idle):  # noqa: ASYNC110 - polling the observers
                await anyio.sleep(0.05)
        group.cancel_scope.cancel()
    await provider.aclose()

    messages = fake.texts(channel)
    assert len(messages) == 3, [m[:60] for m in messages]
    summary, *failures = messages
    assert "28 done" in summary and "2 failed" in summary
    failed = sorted(re.search(r"(b\d\d)", m).group(1) for m in failures)  # type: ignore[union-attr]
    assert failed == ["b07", "b19"]
    assert len(delivered) == 30

    # The platform never had to refuse, and the sends keep the (compressed) budget.
    assert fake.throttled == 0
    entries = sorted(timed.entries, key=lambda e: e.t)
    assert not any(e.op == "error" for e in entries)
    assert check_budget(entries, budget, tolerance=CLOCK_SLACK) == []
    assert check_edit_spacing(entries, budget.edit_spacing, tolerance=CLOCK_SLACK) == []
    assert sum(1 for e in entries if e.op == "edit") >= 2  # the summary was kept current
