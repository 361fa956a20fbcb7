"""The seed's scenario B (a burst of 30 agents) through the core's notifier and sender, the Slack
plugin and its real client, against FakeSlack over local HTTP, on a clock compressed tenfold.

The HTTP is real, so time cannot be virtual: every duration (hold, window, the budget's rate,
windows and edit spacing) is divided by ``SPEED`` instead (``bridge_core.testing.burst``).
FakeSlack enforces Slack's own per-channel limit and answers one scripted 429 midway, which the
plugin must surface and the sender wait out. Checked: the calls the plugin was asked to make
stay within the scaled Slack budget (to 2 ms, the gap between the sender's clock reading and the
provider's); what FakeSlack received is those calls and no more (no hidden resends), within the
budget up to network jitter; Slack never had to refuse anything but the scripted 429; and the
channel reads like scenario B (one summary, two failure posts, a final 28 done and 2 failed).
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from bridge_slack import SLACK_BUDGET, SlackProvider, SlackSettings
from bridge_slack.testing.fake_slack import FakeSlack

from bridge_core.testing.budget import TranscriptEntry, check_budget
from bridge_core.testing.burst import compress_budget, run_scenario_b

pytestmark = pytest.mark.anyio

SPEED = 10.0
CHANNEL = "C0GENERAL"
JITTER = 0.1  # seconds of network and scheduling jitter allowed on arrival times
CALL_SLACK = 0.002  # the sender reads the clock a few statements before the provider does


def arrivals(fake: FakeSlack, start: float) -> list[TranscriptEntry]:
    """What FakeSlack received, as transcript entries on the fake's own clock."""
    entries = []
    for request in fake.requests:
        if request.route not in ("chat.postMessage", "chat.update"):
            continue
        op = "post" if request.route == "chat.postMessage" else "edit"
        ts = request.json.get("ts")
        entries.append(TranscriptEntry(request.at - start, op, CHANNEL, ts, request.json["text"]))
    return entries


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_scenario_b_burst_stays_within_the_slack_budget(
    fake_slack: FakeSlack, slack_settings: dict[str, Any]
) -> None:
    budget = compress_budget(SLACK_BUDGET, SPEED)
    # Slack's own limit, as the fake enforces it: about 1/s per channel with short bursts (one
    # more than the budget's, for network jitter). Any 429 but the scripted one fails the test.
    fake_slack.limit_posting(burst=SLACK_BUDGET.burst + 1, per_second=1.0 * SPEED)
    provider = SlackProvider(SlackSettings.model_validate(slack_settings), profile="burst")
    slack_says_wait_1s = (20.0, lambda: fake_slack.script("chat.update", FakeSlack.rate_limited(1)))
    result = await run_scenario_b(
        provider, channel=CHANNEL, budget=budget, speed=SPEED, script=[slack_says_wait_1s], seed=5
    )

    calls = result.calls
    # What the core asked of the plugin: within the budget, to the sender's own clock reading.
    assert result.violations(tolerance=CALL_SLACK) == []
    received = arrivals(fake_slack, result.wall_start)
    assert len(received) == len(calls), "FakeSlack saw requests the core never asked for"
    assert check_budget(received, budget, tolerance=JITTER) == []

    errors = result.errors
    assert [e.text for e in errors] == ["RateLimited"]
    after_pause = [c for c in calls if c.t > errors[0].t]
    assert after_pause and after_pause[0].t - errors[0].t >= 1.0, "the 429's Retry-After ignored"

    posts, final = result.posts, result.summary_text
    assert len(posts) == 3
    assert "30 agents" in posts[0].text
    failures = sorted(re.findall(r"b07|b19", " ".join(p.text for p in posts[1:])))
    assert failures == ["b07", "b19"] and all("crashed" in p.text for p in posts[1:])
    assert "28 done" in final and "2 failed" in final and "0 running" in final
    assert fake_slack.texts(CHANNEL)[0] == final  # the summary as it stands in the channel
