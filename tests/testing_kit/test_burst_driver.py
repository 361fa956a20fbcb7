"""``bridge_core.testing.burst`` on virtual time, against an in-memory provider: scenario B reads
as the seed says, the recorded calls keep the budget the sender was given, a rate limit is
recorded as an error entry, and a budget the sender did not keep shows up as violations."""

from __future__ import annotations

import itertools

import pytest
from bridge_slack import SLACK_BUDGET

from bridge_core.notify import NotifyConfig
from bridge_core.provider import Capabilities, ChatProvider, MessageRef, RateLimited, SendBudget
from bridge_core.testing.burst import (
    AGENTS,
    BurstResult,
    compress_budget,
    compress_notify,
    run_scenario_b,
)
from bridge_core.testing.clock import anyio_backend  # noqa: F401  (the fixture)

pytestmark = pytest.mark.anyio


class MemoryChannel(ChatProvider):
    """A channel in memory: ``texts`` maps message ids to their current text."""

    name = "memory"
    capabilities = Capabilities(edit=True, max_length=4000)

    def __init__(self, *, refuse_edits: int = 0) -> None:
        self.texts: dict[str, str] = {}
        self.ids = itertools.count(1)
        self.refuse_edits = refuse_edits
        self.closed = False

    async def post(self, channel: str, text: str, *, thread: str | None = None) -> MessageRef:
        message_id = str(next(self.ids))
        self.texts[message_id] = text
        return MessageRef(channel, message_id, thread=thread)

    async def edit(self, ref: MessageRef, text: str) -> MessageRef:
        if self.refuse_edits:
            self.refuse_edits -= 1
            raise RateLimited("slow down", retry_after=1.0)
        self.texts[ref.message_id] = text
        return ref

    async def aclose(self) -> None:
        self.closed = True


async def test_scenario_b_reads_as_the_seed_says_within_the_budget() -> None:
    provider = MemoryChannel()
    budget = compress_budget(SLACK_BUDGET, 10.0)
    result = await run_scenario_b(provider, channel="C1", budget=budget, speed=10.0)

    assert len(result.posts) == 3
    summary, *failures = provider.texts.values()
    assert summary == result.summary_text
    assert "28 done" in summary and "2 failed" in summary
    assert sorted(t for f in failures for t in ("b07", "b19") if t in f) == ["b07", "b19"]
    assert set(result.delivered) == set(AGENTS)
    assert result.errors == []
    assert result.violations(tolerance=1e-9) == []
    assert [c.t for c in result.calls] == sorted(c.t for c in result.calls)
    assert result.calls[-1].t < 120.0 / 10.0 + 2.0  # compressed: about 12 s, not 120
    assert provider.closed


async def test_a_rate_limit_is_recorded_and_waited_out() -> None:
    provider = MemoryChannel(refuse_edits=1)
    budget = compress_budget(SLACK_BUDGET, 10.0)
    result = await run_scenario_b(provider, channel="C1", budget=budget, speed=10.0)

    (error,) = result.errors
    assert error.text == "RateLimited"
    after = [c for c in result.calls if c.t > error.t]
    assert after and after[0].t - error.t >= 1.0
    assert "28 done" in result.summary_text


async def test_violations_name_a_budget_the_sender_did_not_keep() -> None:
    provider = MemoryChannel()
    kept = compress_budget(SLACK_BUDGET, 10.0)
    result = await run_scenario_b(provider, channel="C1", budget=kept, speed=10.0)
    stricter = SendBudget(burst=1, per_second=kept.per_second / 4, edit_spacing=1.0)
    assert BurstResult(calls=result.calls, budget=stricter).violations(tolerance=1e-9) != []


def test_compressing_divides_every_duration() -> None:
    budget = compress_budget(SLACK_BUDGET, 4.0)
    assert budget.burst == SLACK_BUDGET.burst
    assert budget.per_second == SLACK_BUDGET.per_second * 4.0
    assert budget.edit_spacing == SLACK_BUDGET.edit_spacing / 4.0
    assert [w.seconds * 4.0 for w in budget.windows] == [w.seconds for w in SLACK_BUDGET.windows]
    config = compress_notify(NotifyConfig(hold=2.0, window=10.0, forget_after=600.0), 4.0)
    assert (config.hold, config.window, config.forget_after) == (0.5, 2.5, 150.0)
    assert config.threshold == 5
