"""The seed's scenario B burst and a scenario D-style hour, against the real Synapse, compressed.

Real I/O cannot run on a virtual clock, so time is compressed: the homeserver's own message
limit for the bot (a per-user ``rc_message`` override; the admin API takes whole messages per
second) and every duration of the scenario and of the budget are ``K`` times faster
(``bridge_core.testing.burst``). The 429s counted are the homeserver's own answers: the provider
makes exactly one request per call and raises each one, and the wrapper records every failed
call. What the channel ends with is read from the room's real history.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable

import anyio
import pytest
from bridge_matrix import MATRIX_BUDGET, MatrixProvider, MatrixSettings
from bridge_matrix.testing import MatrixUser, Synapse
from bridge_matrix.testing.fixtures import People

from bridge_core import SendBudget
from bridge_core.events import AgentFinished, AgentSpawned, Outcome, StatusChanged
from bridge_core.notify import Notifier, NotifyConfig
from bridge_core.sending import ChannelSender
from bridge_core.testing.budget import check_budget
from bridge_core.testing.burst import (
    TimedProvider,
    compress_budget,
    compress_notify,
    run_scenario_b,
)

pytestmark = pytest.mark.anyio

Settings = Callable[..., MatrixSettings]
CLOCK_SLACK = 0.005
SERVER_BURST = 10  # Synapse's default rc_message burst_count; the preset keeps one in hand


def throttled_bot(
    synapse: Synapse, people: People, *, per_second: int, burst: int = SERVER_BURST
) -> tuple[MatrixUser, str]:
    """A fresh bot in a fresh room, limited by the homeserver to ``per_second`` messages a
    second with a burst of ``burst`` (Synapse's default 10), its bucket full again."""
    bot = synapse.register()
    room = synapse.create_room(people.person, invite=(bot,))
    synapse.override_ratelimit(bot, per_second=per_second, burst=burst)
    # The join was an action of the same limiter: let it drain, so the bucket starts full.
    time.sleep(1.5 / per_second)
    return bot, room


def summary_and_failures(synapse: Synapse, people: People, room: str, bot: MatrixUser) -> None:
    messages = synapse.messages_by(people.person, room, bot.user_id)
    bodies = [m["content"]["body"] for m in messages]
    assert len(messages) == 3, [b[:60] for b in bodies]
    summary, *failures = bodies
    assert "28 done" in summary and "2 failed" in summary, summary
    failed = sorted(re.search(r"(b\d\d)", text).group(1) for text in failures)  # type: ignore[union-attr]
    assert failed == ["b07", "b19"]


async def test_scenario_b_with_the_matched_budget_meets_no_429(
    synapse: Synapse, people: People, make_settings: Settings
) -> None:
    k = 20.0  # Synapse's 0.2/s becomes the override's 4/s
    bot, room = throttled_bot(synapse, people, per_second=int(0.2 * k))
    budget = compress_budget(MATRIX_BUDGET, k)
    provider = MatrixProvider(make_settings(synapse.base_url, bot), profile="burst")
    result = await run_scenario_b(provider, channel=room, budget=budget, speed=k)
    assert result.errors == [], "the homeserver answered 429 to a budget matching its limit"
    assert result.violations(tolerance=CLOCK_SLACK) == []
    assert len(result.delivered) == 30
    summary_and_failures(synapse, people, room, bot)
    assert sum(1 for e in result.calls if e.op == "edit") >= 2  # the summary was kept current


async def test_scenario_b_with_a_generous_budget_absorbs_every_429(
    synapse: Synapse, people: People, make_settings: Settings
) -> None:
    k = 20.0
    # The homeserver at half the compressed default rate and a burst of 3; the budget ten times
    # its rate and ten times its burst: the homeserver must refuse, again and again.
    bot, room = throttled_bot(synapse, people, per_second=2, burst=3)
    generous = SendBudget(burst=30, per_second=20.0, edit_spacing=0.0)
    provider = MatrixProvider(make_settings(synapse.base_url, bot), profile="burst")
    result = await run_scenario_b(provider, channel=room, budget=generous, speed=k)
    refused = [e for e in result.errors if e.text == "RateLimited"]
    assert len(refused) >= 3, f"only {len(refused)} 429s: the test shows too little"
    assert len(refused) == len(result.errors), result.errors
    assert len(result.delivered) == 30, "a terminal state was lost to a 429"
    # Every pause ended with the latest state: the summary's last write is the final count.
    summary_and_failures(synapse, people, room, bot)
    assert "28 done" in result.summary_text


async def test_a_compressed_hour_with_the_matched_budget_meets_no_429(
    synapse: Synapse, people: People, make_settings: Settings
) -> None:
    """Scenario D's shape (twenty agents, status changes all hour, all finish at the end) on
    Matrix's budget: with K = 150 the hour takes 24 s and the bucket binds all along."""
    k = 150.0
    bot, room = throttled_bot(synapse, people, per_second=int(0.2 * k))
    budget = compress_budget(MATRIX_BUDGET, k)
    rng = random.Random(11)
    names = [f"t{i:02}" for i in range(20)]
    changes = sorted((rng.uniform(60.0, 3500.0), rng.choice(names)) for _ in range(1500))
    provider = MatrixProvider(make_settings(synapse.base_url, bot), profile="hour")
    timed = TimedProvider(provider, channel=room)
    sender = ChannelSender(timed, channel=room, budget=budget, random=random.Random(1))
    delivered: dict[str, float] = {}
    notifier = Notifier(
        room,
        sender,
        capabilities=provider.capabilities,
        config=compress_notify(NotifyConfig(), k),
        escape=provider.escape,
        on_terminal_delivered=delivered.__setitem__,
    )
    async with timed, anyio.create_task_group() as group:
        group.start_soon(sender.run)
        group.start_soon(notifier.run)
        start = timed.start = anyio.current_time()
        for i, name in enumerate(names):
            await anyio.sleep_until(start + i * 3.0 / k)
            notifier.handle(AgentSpawned(name, "w1"))
        for n, (at, name) in enumerate(changes):
            await anyio.sleep_until(start + at / k)
            notifier.handle(StatusChanged(name, "w1", status=f"change {n}"))
        for i, name in enumerate(names):
            await anyio.sleep_until(start + (3550.0 + i) / k)
            outcome = Outcome.DONE if i % 4 else Outcome.KILLED
            notifier.handle(AgentFinished(name, "w1", outcome=outcome, cost=2.0, turns=i))
        with anyio.fail_after(60):
            while not (notifier.idle and sender.idle):  # noqa: ASYNC110 (no event to wait on)
                await anyio.sleep(0.05)
        group.cancel_scope.cancel()
    calls = sorted(timed.entries, key=lambda entry: entry.t)
    errors = [c for c in calls if c.op == "error"]
    assert errors == [], f"the homeserver refused {len(errors)} sends within its own limit"
    assert check_budget(calls, budget, tolerance=CLOCK_SLACK) == []
    sends = [c for c in calls if c.op in ("post", "edit")]
    # The budget allows burst + 0.2/s * 3600 s (= 729) in the hour and 1,500 changes ask for
    # more, so the bucket binds whenever the homeserver keeps up: 571 sends with the machine at
    # a load of 3, far fewer when Synapse is starved of CPU and answers slower than the budget.
    assert len(sends) >= 50, f"only {len(sends)} sends: the hour made no real traffic"
    assert sorted(delivered) == sorted(names)
    current = {m["content"]["body"] for m in synapse.messages_by(people.person, room, bot.user_id)}
    for i, name in enumerate(names):
        outcome = "done" if i % 4 else "killed"
        own = [text for text in current if f" {name} " in text or f" {name} [" in text]
        if own:
            assert any(outcome in text for text in own), own
            continue
        # Spawns 20 ms apart can share one hold when the loop lags (a loaded machine): the
        # agent is then a member of a burst summary, which counts done and killed members
        # without a post of their own (ADR 0014).
        listed = [t for t in current if re.search(rf"\nagents: (.*, )?{name}(,| and|$)", t)]
        assert listed, f"no message of {name} in the room, neither its own nor a summary's"
        assert any(re.search(rf"\b[1-9][0-9]* {outcome}\b", text) for text in listed), listed
