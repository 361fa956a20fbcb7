"""``handle_all``'s status path (ADR 0177): ``_store_only`` holds exactly the names whose status
change is a store of the news, so an idle agent (live, with edits, owing the sender nothing) is
left out and its status change submits it. Against a sender that answers (deliveries, deleted
messages, refusals), batches decide as ``handle`` does one event at a time, and the view holds
after every batch and every round of outcomes."""

from __future__ import annotations

import random
from typing import Any

import anyio
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge_core.events import (
    AgentFinished,
    AgentGone,
    AgentSpawned,
    FleetEvent,
    Outcome,
    Output,
    StatusChanged,
)
from bridge_core.notify import Notifier, NotifyConfig
from bridge_core.notify.live import Phase, TrackedAgent
from bridge_core.provider import Capabilities
from bridge_core.testing.clock import run_virtual

from .conftest import AnsweringSender


def check_store_only(notifier: Notifier) -> None:
    """Every name it holds maps as in ``_running`` and needs only a store; every name it lacks
    is an idle agent (a missing name costs a miss, a wrong one would lose a submission)."""
    running: dict[str, TrackedAgent] = notifier._running
    store_only: dict[str, TrackedAgent] = notifier._store_only
    sink: TrackedAgent = notifier._sink
    edit = notifier.capabilities.edit
    assert store_only.keys() <= running.keys()
    for name, agent in running.items():
        idle = agent is not sink and agent.phase is Phase.LIVE and edit and not agent.outstanding
        if name in store_only:
            assert store_only[name] is agent
            assert not idle
        else:
            assert idle


def events() -> st.SearchStrategy[FleetEvent]:
    agent, workspace = st.sampled_from(["a0", "a1", "a2"]), st.sampled_from(["w", "off"])
    status = st.builds(StatusChanged, agent, workspace, status=st.sampled_from(["s1", "s2"]))
    return st.one_of(
        status,
        status,
        status,
        st.builds(AgentSpawned, agent, workspace),
        st.builds(AgentFinished, agent, workspace, outcome=st.sampled_from(list(Outcome))),
        st.builds(AgentGone, agent, workspace),
        st.builds(Output, agent, workspace, text=st.just("x")),
    )


async def feed(
    batches: list[list[FleetEvent]],
    config: NotifyConfig,
    edit: bool,
    seed: int,
    one_by_one: bool,
) -> tuple[Any, ...]:
    sender = AnsweringSender(seed)
    capabilities = Capabilities(edit=edit, max_length=4000)
    notifier = Notifier("c", sender, capabilities=capabilities, config=config)
    shares = random.Random(seed + 1)
    async with anyio.create_task_group() as group:
        group.start_soon(notifier.run)
        for batch in batches:
            if one_by_one:
                for event in batch:
                    notifier.handle(event)
            else:
                notifier.handle_all(batch)
            check_store_only(notifier)
            await anyio.sleep(0.73)  # holds end, finished names are forgotten
            sender.answer(shares.choice([0.0, 0.5, 1.0]))
            check_store_only(notifier)
        group.cancel_scope.cancel()
    return notifier.statistics(), notifier.live_view(), sender.submissions, sender.texts


@given(
    batches=st.lists(st.lists(events(), max_size=8), max_size=12),
    hold=st.sampled_from([0.0, 1.0]),
    threshold=st.sampled_from([2, 100]),
    forget_after=st.sampled_from([1.0, 600.0]),
    workspaces=st.sampled_from([None, frozenset({"w"})]),
    edit=st.booleans(),
    seed=st.integers(0, 100),
)
@settings(max_examples=300, deadline=None)
def test_batches_decide_as_one_by_one_against_a_sender_that_answers(
    batches: list[list[FleetEvent]],
    hold: float,
    threshold: int,
    forget_after: float,
    workspaces: frozenset[str] | None,
    edit: bool,
    seed: int,
) -> None:
    config = NotifyConfig(
        hold=hold, threshold=threshold, forget_after=forget_after, workspaces=workspaces
    )
    alone = run_virtual(feed, batches, config, edit, seed, True)
    batched = run_virtual(feed, batches, config, edit, seed, False)
    assert batched == alone


def test_an_idle_agents_status_change_submits_it_and_a_busy_ones_only_stores() -> None:
    async def scenario() -> None:
        sender = AnsweringSender(0)
        capabilities = Capabilities(edit=True, max_length=4000)
        notifier = Notifier("c", sender, capabilities=capabilities, config=NotifyConfig(hold=0.0))
        async with anyio.create_task_group() as group:
            group.start_soon(notifier.run)
            notifier.handle_all([AgentSpawned("a", "w")])
            await anyio.sleep(0.1)  # the hold ends: the post is submitted
            assert len(sender.submissions) == 1 and "a" in notifier._store_only
            sender.random = random.Random(1)  # 0.134..., 0.847...: the post is delivered
            sender.answer(1.0)
            assert "a" not in notifier._store_only  # live, owing nothing: idle
            notifier.handle_all([StatusChanged("a", "w", status="one")])
            assert len(sender.submissions) == 2 and "a" in notifier._store_only
            notifier.handle_all([StatusChanged("a", "w", status="two")])
            assert len(sender.submissions) == 2  # the queued edit renders the latest news
            assert notifier.live_view()[0]["status"] == "two"
            group.cancel_scope.cancel()

    run_virtual(scenario)
