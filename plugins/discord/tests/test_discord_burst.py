"""Seed scenario B (30 spawns in 2 s, 2 crash at 30 s, the rest done by 120 s) through the real
notifier, the real sender, the Discord provider and discord.py against FakeDiscord.

Real I/O cannot run on a virtual clock, so time is compressed instead: every duration (the
notifier's hold and window, the budget's rate, windows and edit spacing, the fake's own per-channel
limit) is divided by ``K`` and the scenario runs in a few real seconds
(``bridge_core.testing.burst``).
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from bridge_discord import DISCORD_BUDGET, DiscordProvider, DiscordSettings
from bridge_discord.testing.fake_discord import FakeDiscord

from bridge_core.testing.burst import compress_budget, run_scenario_b

pytestmark = pytest.mark.anyio

K = 20.0
# The sender reads the clock just before calling the provider; the wrapper reads it just after,
# with no await between, so only a thread switch can separate the two.
CLOCK_SLACK = 0.005


async def test_scenario_b_stays_within_discords_budget(
    fake: FakeDiscord, make_settings: Callable[..., DiscordSettings], channel: int
) -> None:
    fake.channel_window = 5.0 / K  # Discord's 5 creates per 5 s per channel, compressed
    budget = compress_budget(DISCORD_BUDGET, K)
    provider = DiscordProvider(make_settings(fake), profile="burst")
    result = await run_scenario_b(provider, channel=str(channel), budget=budget, speed=K)

    messages = fake.messages_in(channel)
    assert len(messages) == 3, [m["content"][:60] for m in messages]
    summary, *failures = messages
    assert "28 done" in summary["content"] and "2 failed" in summary["content"]
    failed = sorted(re.search(r"(b\d\d)", m["content"]).group(1) for m in failures)  # type: ignore[union-attr]
    assert failed == ["b07", "b19"]
    assert len(result.delivered) == 30

    # The platform never had to refuse, and the sends keep the (compressed) budget.
    assert fake.rate_limited_creates == 0
    assert result.errors == []
    assert result.violations(tolerance=CLOCK_SLACK) == []
    assert sum(1 for e in result.calls if e.op == "edit") >= 2  # the summary was kept current
