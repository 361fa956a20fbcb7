"""Seed scenario B (30 spawns in 2 s, 2 crash at 30 s, the rest done by 120 s) through the real
notifier, the real sender, the Discord provider and discord.py against FakeDiscord.

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
from bridge_discord import DiscordProvider, DiscordSettings

from bridge_core import DISCORD_BUDGET, SendBudget, Window
from bridge_core.events import AgentFinished, AgentSpawned, Outcome
from bridge_core.notify import Notifier, NotifyConfig
from bridge_core.sending import ChannelSender
from bridge_core.testing.budget import TranscriptEntry, check_budget, check_edit_spacing
from bridge_core.testing.fake_discord import FakeDiscord

pytestmark = pytest.mark.anyio

K = 20.0
JITTER = 0.02  # seconds of scheduling and network noise allowed when re-checking arrivals


def compress(budget: SendBudget, k: float) -> SendBudget:
    return SendBudget(
        burst=budget.burst,
        per_second=budget.per_second * k,
        windows=tuple(Window(w.limit, w.seconds / k) for w in budget.windows),
        edit_spacing=budget.edit_spacing / k,
    )


async def test_scenario_b_stays_within_discords_budget(
    fake: FakeDiscord, make_settings: Callable[..., DiscordSettings], channel: int
) -> None:
    fake.channel_window = 5.0 / K  # Discord's 5 creates per 5 s per channel, compressed
    budget = compress(DISCORD_BUDGET, K)
    config = NotifyConfig(hold=2.0 / K, window=10.0 / K, forget_after=600.0 / K)
    provider = DiscordProvider(make_settings(fake), profile="burst")
    sender = ChannelSender(provider, channel=str(channel), budget=budget, random=random.Random(1))
    delivered: dict[str, float] = {}
    notifier = Notifier(
        str(channel),
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

    messages = fake.messages_in(channel)
    assert len(messages) == 3, [m["content"][:60] for m in messages]
    summary, *failures = messages
    assert "28 done" in summary["content"] and "2 failed" in summary["content"]
    failed = sorted(re.search(r"(b\d\d)", m["content"]).group(1) for m in failures)  # type: ignore[union-attr]
    assert failed == ["b07", "b19"]
    assert len(delivered) == 30

    # The platform never had to refuse, and the arrivals keep the (compressed) budget.
    assert fake.rate_limited_creates == 0
    writes = fake.requests_to("create_message") + fake.requests_to("edit_message")
    entries = sorted(
        (
            TranscriptEntry(
                t=r.at,
                op="post" if r.route == "create_message" else "edit",
                channel=str(channel),
                message_id=r.params.get("message_id"),
                text="",
            )
            for r in writes
        ),
        key=lambda e: e.t,
    )
    assert check_budget(entries, budget, tolerance=JITTER) == []
    assert check_edit_spacing(entries, budget.edit_spacing, tolerance=JITTER) == []
    assert sum(1 for e in entries if e.op == "edit") >= 2  # the summary was kept current
