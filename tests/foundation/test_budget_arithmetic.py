"""Budget arithmetic: a token bucket alone breaks an hourly cap; the sliding windows hold it.

A pure model of ``SendBudget``'s meaning (no I/O, no clock): a sender is admitted at the earliest
time the bucket has a token and every window has room. Driven greedily (a send wanted at every
instant, the worst case), no window of any preset may ever hold more than its limit.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pytest
from bridge_discord import DISCORD_BUDGET
from bridge_slack import SLACK_BUDGET
from bridge_teams import TEAMS_BUDGET
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge_core.plugins import create_plugin_manager
from bridge_core.provider import SendBudget, Window


def admit(budget: SendBudget, wanted: Sequence[float]) -> list[float]:
    """The send times of requests wanted at ``wanted`` (sorted), each sent as early as allowed."""
    tokens = float(budget.burst)
    clock = 0.0
    sent: list[float] = []
    for want in wanted:
        at = max(want, clock)
        tokens = min(float(budget.burst), tokens + (at - clock) * budget.per_second)
        clock = at
        if tokens < 1.0:
            wait = (1.0 - tokens) / budget.per_second
            at = clock + wait
            tokens = 1.0
            clock = at
        for window in budget.windows:  # half-open windows [x - seconds, x)
            if len(sent) >= window.limit:
                at = max(at, sent[-window.limit] + window.seconds)
        tokens = min(float(budget.burst), tokens + (at - clock) * budget.per_second)
        clock = at
        tokens -= 1.0
        sent.append(at)
    return sent


def greedy(budget: SendBudget, horizon: float) -> list[float]:
    """Send as fast as the budget allows until ``horizon``."""
    sent: list[float] = []
    batch = admit(budget, [0.0] * int(horizon * budget.per_second * 1.2 + budget.burst + 10))
    for at in batch:
        if at >= horizon:
            break
        sent.append(at)
    return sent


def most_in_any_window(times: Sequence[float], seconds: float) -> int:
    """The largest number of sends inside any half-open window of ``seconds``."""
    best, start = 0, 0
    for end, at in enumerate(times):
        while times[start] + seconds <= at:  # the same sum admit() compares
            start += 1
        best = max(best, end - start + 1)
    return best


def test_a_bucket_alone_admits_1807_an_hour_on_teams() -> None:
    bucket_only = SendBudget(burst=TEAMS_BUDGET.burst, per_second=TEAMS_BUDGET.per_second)
    sent = admit(bucket_only, [0.0] * 2000)
    in_first_hour = [at for at in sent if at <= 3600.0]
    assert len(in_first_hour) == 7 + 1800  # burst + rate x W: the seed's broken hourly cap


@pytest.mark.parametrize("name", ["slack", "discord", "teams"])
def test_every_window_of_a_preset_holds_under_a_greedy_sender(name: str) -> None:
    budget = create_plugin_manager().providers.budget_presets[name]  # the plugins' presets
    sent = greedy(budget, horizon=3 * 3600.0)
    for window in budget.windows:
        assert most_in_any_window(sent, window.seconds) <= window.limit, window
    hourly = next(w for w in budget.windows if w.seconds == 3600.0)
    # The windows cost almost nothing: three hours carry nearly three hourly caps.
    assert len(sent) >= 3 * hourly.limit - budget.burst


def test_teams_hourly_cap_is_1800_and_the_short_windows_bind_too() -> None:
    sent = greedy(TEAMS_BUDGET, horizon=2 * 3600.0)
    assert most_in_any_window(sent, 3600.0) == 1800
    assert most_in_any_window(sent, 1.0) <= 7
    assert most_in_any_window(sent, 2.0) <= 8
    assert most_in_any_window(sent, 30.0) <= 60


def test_presets_match_seed_adr_0007() -> None:
    assert (SLACK_BUDGET.burst, SLACK_BUDGET.per_second) == (3, 1.0)
    assert (DISCORD_BUDGET.burst, DISCORD_BUDGET.per_second) == (5, 1.0)
    assert (TEAMS_BUDGET.burst, TEAMS_BUDGET.per_second) == (7, 0.5)
    assert Window(3600, 3600.0) in SLACK_BUDGET.windows + DISCORD_BUDGET.windows
    assert Window(1800, 3600.0) in TEAMS_BUDGET.windows
    assert {b.edit_spacing for b in (SLACK_BUDGET, DISCORD_BUDGET, TEAMS_BUDGET)} == {2.0}


@settings(max_examples=60, deadline=None)
@given(
    gaps=st.lists(st.floats(min_value=0.0, max_value=5.0), min_size=1, max_size=400),
    burst=st.integers(min_value=1, max_value=10),
    per_hour=st.integers(min_value=60, max_value=4000),
    limit=st.integers(min_value=1, max_value=20),
    seconds=st.floats(min_value=0.5, max_value=60.0),
)
def test_any_arrival_pattern_respects_every_window(
    gaps: list[float], burst: int, per_hour: int, limit: int, seconds: float
) -> None:
    budget = SendBudget.hourly(burst=burst, per_hour=per_hour, extra=(Window(limit, seconds),))
    wanted, now = [], 0.0
    for gap in gaps:
        now += gap
        wanted.append(now)
    sent = admit(budget, wanted)
    assert all(b >= a for a, b in itertools.pairwise(sent))
    assert all(s >= w for s, w in zip(sent, wanted, strict=True))
    for window in budget.windows:
        assert most_in_any_window(sent, window.seconds) <= window.limit


def test_invalid_budgets_say_what_is_wrong() -> None:
    with pytest.raises(ValueError, match="burst must be at least 1"):
        SendBudget(burst=0, per_second=1.0)
    with pytest.raises(ValueError, match="per_second must be positive"):
        SendBudget(burst=1, per_second=0.0)
    with pytest.raises(ValueError, match="window must have limit >= 1"):
        SendBudget(burst=1, per_second=1.0, windows=(Window(0, 1.0),))
    assert SLACK_BUDGET.to_json()["windows"] == [{"limit": 3600, "seconds": 3600.0}]
