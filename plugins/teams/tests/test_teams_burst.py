"""Seed scenario B (30 spawns in 2 s, 2 crash at 30 s, the rest done by 120 s) through the real
notifier, the real sender, the Teams provider and botframework-connector against FakeTeams.

Real I/O cannot run on a virtual clock, so time is compressed instead: every duration (the
notifier's hold and window, the budget's rate, windows and edit spacing, the fake's own
per-conversation limits) is divided by ``K`` and the scenario runs in a few real seconds
(``bridge_core.testing.burst``).
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from bridge_teams import TEAMS_BUDGET, TeamsProvider, TeamsSettings
from bridge_teams.testing.fake_teams import FakeTeams

from bridge_core.testing.burst import compress_budget, run_scenario_b

pytestmark = pytest.mark.anyio

K = 20.0
# The sender reads the clock just before calling the provider; the wrapper reads it just after,
# with no await between, so only a thread switch can separate the two.
CLOCK_SLACK = 0.005


async def test_scenario_b_stays_within_teams_budget(
    fake: FakeTeams, make_settings: Callable[..., TeamsSettings], channel: str
) -> None:
    # Teams' per-conversation windows (7/1 s, 8/2 s, 60/30 s, 1800/h), compressed.
    fake.windows = tuple((limit, seconds / K) for limit, seconds in fake.windows)
    budget = compress_budget(TEAMS_BUDGET, K)
    provider = TeamsProvider(make_settings(fake), profile="burst")
    result = await run_scenario_b(provider, channel=channel, budget=budget, speed=K)

    messages = fake.texts(channel)
    assert len(messages) == 3, [m[:60] for m in messages]
    summary, *failures = messages
    assert "28 done" in summary and "2 failed" in summary
    failed = sorted(re.search(r"(b\d\d)", m).group(1) for m in failures)  # type: ignore[union-attr]
    assert failed == ["b07", "b19"]
    assert len(result.delivered) == 30

    # The platform never had to refuse, and the sends keep the (compressed) budget.
    assert fake.throttled == 0
    assert result.errors == []
    assert result.violations(tolerance=CLOCK_SLACK) == []
    assert sum(1 for e in result.calls if e.op == "edit") >= 2  # the summary was kept current
