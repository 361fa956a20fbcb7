"""What the notifier's status path relies on (ADR 0168): its running view holds the same names
as its agents, an agent not ended as itself and an ended one as the sink, which owes work for
ever; and an agent's version counts a status change by the news event it stores."""

from __future__ import annotations

import anyio
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge_core.events import (
    AgentFinished,
    AgentGone,
    AgentSpawned,
    FleetEvent,
    Outcome,
    StatusChanged,
)
from bridge_core.notify import Notifier, NotifyConfig
from bridge_core.notify.live import TrackedAgent
from bridge_core.provider import Capabilities
from bridge_core.testing.clock import run_virtual

from .conftest import AnsweringSender


def check_running_view(notifier: Notifier) -> None:
    agents: dict[str, TrackedAgent] = notifier._agents
    running: dict[str, TrackedAgent] = notifier._running
    sink: TrackedAgent = notifier._sink
    assert running.keys() == agents.keys()
    for name, agent in agents.items():
        assert running[name] is (sink if agent.ended else agent)
    assert sink.outstanding == 1


def events() -> st.SearchStrategy[FleetEvent]:
    agent, workspace = st.sampled_from(["a0", "a1", "a2"]), st.sampled_from(["w", "off"])
    return st.one_of(
        st.builds(StatusChanged, agent, workspace, status=st.sampled_from(["s1", "s2"])),
        st.builds(AgentSpawned, agent, workspace),
        st.builds(AgentFinished, agent, workspace, outcome=st.sampled_from(list(Outcome))),
        st.builds(AgentGone, agent, workspace),
    )


async def feed(
    batches: list[list[FleetEvent]], config: NotifyConfig, edit: bool, seed: int
) -> None:
    sender = AnsweringSender(seed)
    capabilities = Capabilities(edit=edit, max_length=4000)
    notifier = Notifier("c", sender, capabilities=capabilities, config=config)
    async with anyio.create_task_group() as group:
        group.start_soon(notifier.run)
        for batch in batches:
            notifier.handle_all(batch)
            check_running_view(notifier)
            await anyio.sleep(0.73)  # holds end, finished names are forgotten
            sender.answer(1.0)  # deliveries retire ended agents
            check_running_view(notifier)
        group.cancel_scope.cancel()


@given(
    batches=st.lists(st.lists(events(), max_size=8), max_size=10),
    hold=st.sampled_from([0.0, 1.0]),
    threshold=st.sampled_from([2, 100]),
    forget_after=st.sampled_from([1.0, 600.0]),
    edit=st.booleans(),
    seed=st.integers(0, 100),
)
@settings(max_examples=200, deadline=None)
def test_the_running_view_holds_the_agents_and_an_ended_one_as_the_sink(
    batches: list[list[FleetEvent]],
    hold: float,
    threshold: int,
    forget_after: float,
    edit: bool,
    seed: int,
) -> None:
    config = NotifyConfig(
        hold=hold, threshold=threshold, forget_after=forget_after, workspaces=frozenset({"w"})
    )
    run_virtual(feed, batches, config, edit, seed)


def test_a_new_news_event_is_a_new_version_and_the_same_one_is_not() -> None:
    agent = TrackedAgent(key=(0, "agent:a", 1), name="a", workspace="w")
    first = agent.version
    news = StatusChanged("a", "w", status="one")
    agent.news = news
    second = agent.version
    assert second > first and agent.status == "one"
    assert agent.version == second  # nothing new since
    agent.news = news  # the same event handed over again: the message already shows it
    assert agent.version == second
    agent.news = StatusChanged("a", "w", status="one")  # a new event, even with the same text
    assert agent.version > second
    agent.changed = True  # another change (an end) counts as before
    third = agent.version
    assert agent.version == third
    agent.changed = True
    agent.news = StatusChanged("a", "w", status="two")
    assert agent.version == third + 1  # two changes between reads: one version
