"""The seed's scenario B (a burst of 30 agents) through the core's notifier and sender, the Slack
plugin and its real client, against FakeSlack over local HTTP, on a clock compressed tenfold.

The HTTP is real, so time cannot be virtual: every duration (hold, window, the budget's rate,
windows and edit spacing) is divided by ``SPEED`` instead. FakeSlack enforces Slack's own
per-channel limit and answers one scripted 429 midway, which the plugin must surface and the
sender wait out. Checked: the calls the plugin was asked to make stay within the scaled Slack
budget (to 2 ms, the gap between the sender's clock reading and the provider's); what
FakeSlack received is those calls and no more (no hidden resends), within the budget up to
network jitter; Slack never had to refuse anything but the scripted 429; and the channel reads
like scenario B (one summary, two failure posts, a final 28 done and 2 failed).
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Sequence
from typing import Any

import anyio
import pytest
from bridge_slack import SlackProvider, SlackSettings

from bridge_core.events import AgentFinished, AgentSpawned, Outcome
from bridge_core.notify import Notifier, NotifyConfig
from bridge_core.provider import SLACK_BUDGET, MessageRef, ProviderError, SendBudget, Window
from bridge_core.sending import ChannelSender
from bridge_core.testing.budget import TranscriptEntry, check_budget, check_edit_spacing
from bridge_core.testing.fake_slack import FakeSlack

pytestmark = pytest.mark.anyio

SPEED = 10.0
CHANNEL = "C0GENERAL"
JITTER = 0.1  # seconds of network and scheduling jitter allowed on arrival times
CALL_SLACK = 0.002  # the sender reads the clock a few statements before the provider does


def scaled(budget: SendBudget, speed: float) -> SendBudget:
    return SendBudget(
        burst=budget.burst,
        per_second=budget.per_second * speed,
        windows=tuple(Window(w.limit, w.seconds / speed) for w in budget.windows),
        edit_spacing=budget.edit_spacing / speed,
    )


class RecordingSlack(SlackProvider):
    """The real provider, noting when the core asked for each call (anyio's clock)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[TranscriptEntry] = []
        self.start = 0.0

    def _note(self, t: float, op: str, message_id: str | None, text: str) -> None:
        self.calls.append(TranscriptEntry(t - self.start, op, CHANNEL, message_id, text))

    async def post(self, channel: str, text: str, *, thread: str | None = None) -> MessageRef:
        t = anyio.current_time()
        try:
            ref = await super().post(channel, text, thread=thread)
        except ProviderError as exc:
            self._note(t, "error", None, type(exc).__name__)
            raise
        self._note(t, "post", ref.message_id, text)
        return ref

    async def edit(self, ref: MessageRef, text: str) -> MessageRef:
        t = anyio.current_time()
        try:
            result = await super().edit(ref, text)
        except ProviderError as exc:
            self._note(t, "error", ref.message_id, type(exc).__name__)
            raise
        self._note(t, "edit", ref.message_id, text)
        return result


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


def posts_and_finals(calls: Sequence[TranscriptEntry]) -> tuple[list[TranscriptEntry], str]:
    posts = [c for c in calls if c.op == "post"]
    summary_id = posts[0].message_id
    writes = [c for c in calls if c.message_id == summary_id and c.op != "error"]
    return posts, writes[-1].text


async def at(start: float, seconds: float) -> None:
    await anyio.sleep_until(start + seconds / SPEED)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_scenario_b_burst_stays_within_the_slack_budget(
    fake_slack: FakeSlack, slack_settings: dict[str, Any]
) -> None:
    budget = scaled(SLACK_BUDGET, SPEED)
    # Slack's own limit, as the fake enforces it: about 1/s per channel with short bursts (one
    # more than the budget's, for network jitter). Any 429 but the scripted one fails the test.
    fake_slack.limit_posting(burst=SLACK_BUDGET.burst + 1, per_second=1.0 * SPEED)
    provider = RecordingSlack(SlackSettings.model_validate(slack_settings), profile="burst")
    sender = ChannelSender(provider, channel=CHANNEL, budget=budget, random=random.Random(5))
    config = NotifyConfig(hold=2.0 / SPEED, threshold=5, window=10.0 / SPEED)
    notifier = Notifier(
        CHANNEL, sender, capabilities=provider.capabilities, config=config, escape=provider.escape
    )
    async with provider, anyio.create_task_group() as group:
        group.start_soon(sender.run)
        group.start_soon(notifier.run)
        start = provider.start = anyio.current_time()
        wall_start = time.monotonic()
        for i in range(30):
            await at(start, i * 0.06)
            notifier.handle(AgentSpawned(f"b{i:02}", "w1"))
        await at(start, 20.0)
        fake_slack.script("chat.update", FakeSlack.rate_limited(1))  # Slack says: wait 1 s
        await at(start, 30.0)
        for crashed in ("b07", "b19"):
            notifier.handle(AgentFinished(crashed, "w1", outcome=Outcome.CRASHED, turns=3))
        rest = [f"b{i:02}" for i in range(30) if i not in (7, 19)]
        for n, name in enumerate(rest):
            await at(start, 31.0 + n * 3.0)
            notifier.handle(AgentFinished(name, "w1", outcome=Outcome.DONE, cost=0.1))
        with anyio.fail_after(30):
            while not (notifier.idle and sender.idle):  # noqa: ASYNC110 (no hook to wait on)
                await anyio.sleep(0.05)
        group.cancel_scope.cancel()

    calls = provider.calls
    # What the core asked of the plugin: within the budget, to the sender's own clock reading.
    assert check_budget(calls, budget, tolerance=CALL_SLACK) == []
    assert check_edit_spacing(calls, budget.edit_spacing, tolerance=CALL_SLACK) == []
    received = arrivals(fake_slack, wall_start)
    assert len(received) == len(calls), "FakeSlack saw requests the core never asked for"
    assert check_budget(received, budget, tolerance=JITTER) == []

    errors = [c for c in calls if c.op == "error"]
    assert [e.text for e in errors] == ["RateLimited"]
    after_pause = [c for c in calls if c.t > errors[0].t]
    assert after_pause and after_pause[0].t - errors[0].t >= 1.0, "the 429's Retry-After ignored"

    posts, final = posts_and_finals(calls)
    assert len(posts) == 3
    assert "30 agents" in posts[0].text
    failures = sorted(re.findall(r"b07|b19", " ".join(p.text for p in posts[1:])))
    assert failures == ["b07", "b19"] and all("crashed" in p.text for p in posts[1:])
    assert "28 done" in final and "2 failed" in final and "0 running" in final
    assert fake_slack.texts(CHANNEL)[0] == final  # the summary as it stands in the channel
