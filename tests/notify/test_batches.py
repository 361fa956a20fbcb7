"""``Notifier.handle_all`` (the gateway's batch entry) decides and counts exactly as ``handle``
does one event at a time (ADR 0157): the same submissions to the sender, in the same order, the
same agents held and the same statistics, for any stream cut into any batches; and an event
that raises stops a batch with the counts of what was reached stored."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import anyio
import pytest
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
    ToolStarted,
    UnknownEvent,
)
from bridge_core.notify import Notifier, NotifyConfig
from bridge_core.provider import Capabilities
from bridge_core.testing.clock import run_virtual


class RecordingSender:
    """A sender that keeps every submission (``SenderLike``); a queued key is replaced."""

    def __init__(self) -> None:
        self.submissions: list[tuple[Any, ...]] = []
        self.queued: set[Hashable] = set()

    def submit(self, key: Hashable, **work: Any) -> bool:
        _, name, serial = key  # type: ignore[misc]  # the outbox's (id, name, serial) key
        self.submissions.append((name, serial, work["priority"], work["edit"] is not None))
        replaced = key in self.queued
        self.queued.add(key)
        return replaced


AGENTS = [f"a{n}" for n in range(4)]
WORKSPACES = ["w0", "w1", "off"]  # "off" is filtered out when the channel filters


def events() -> st.SearchStrategy[FleetEvent]:
    agent, workspace = st.sampled_from(AGENTS), st.sampled_from(WORKSPACES)
    return st.one_of(
        st.builds(StatusChanged, agent, workspace, status=st.sampled_from(["s1", "s2", ""])),
        st.builds(AgentSpawned, agent, workspace, title=st.sampled_from(["", "t"])),
        st.builds(AgentFinished, agent, workspace, outcome=st.sampled_from(list(Outcome))),
        st.builds(AgentGone, agent, workspace, reason=st.sampled_from(["", "killed"])),
        st.builds(Output, agent, workspace, text=st.just("x")),
        st.builds(ToolStarted, agent, workspace, tool=st.just("grep")),
        st.builds(
            UnknownEvent,
            st.text(max_size=3),
            st.text(max_size=3),
            unknown_kind=st.text(max_size=5),
            data=st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
        ),
    )


def configs() -> st.SearchStrategy[NotifyConfig]:
    kinds = st.sets(
        st.sampled_from(["AgentSpawned", "StatusChanged", "AgentFinished", "AgentGone", "Output"])
    )
    return st.builds(
        NotifyConfig,
        hold=st.sampled_from([0.0, 5.0]),
        threshold=st.sampled_from([2, 100]),
        kinds=kinds,
        workspaces=st.sampled_from([None, frozenset({"w0", "w1"})]),
    )


def cut(stream: Sequence[FleetEvent], sizes: Sequence[int]) -> list[list[FleetEvent]]:
    """``stream`` in consecutive batches of the given sizes (the last takes the rest); a size
    of 0 is an empty batch."""
    batches, start = [], 0
    for size in sizes:
        batches.append(list(stream[start : start + size]))
        start += size
    batches.append(list(stream[start:]))
    return batches


def observed(notifier: Notifier, sender: RecordingSender) -> tuple[Any, ...]:
    return notifier.statistics(), notifier.live_view(), sender.submissions


async def feed(
    config: NotifyConfig, edit: bool, batches: list[list[FleetEvent]], one_by_one: bool
) -> tuple[Any, ...]:
    sender = RecordingSender()
    capabilities = Capabilities(edit=edit, max_length=4000)
    notifier = Notifier("c", sender, capabilities=capabilities, config=config)
    async with anyio.create_task_group() as group:
        group.start_soon(notifier.run)
        for batch in batches:
            if one_by_one:
                for event in batch:
                    notifier.handle(event)
            else:
                notifier.handle_all(batch)
            # Holds end between batches (virtual time), never at a batch's instant: trio runs
            # the tasks due at one instant in a random order.
            await anyio.sleep(0.73)
        group.cancel_scope.cancel()
    return observed(notifier, sender)


@given(
    stream=st.lists(events(), max_size=60),
    sizes=st.lists(st.integers(0, 12), max_size=8),
    config=configs(),
    edit=st.booleans(),
)
@settings(max_examples=300, deadline=None)
def test_a_batch_decides_and_counts_as_its_events_one_by_one(
    stream: list[FleetEvent], sizes: list[int], config: NotifyConfig, edit: bool
) -> None:
    batches = cut(stream, sizes)
    alone = run_virtual(feed, config, edit, batches, True)
    batched = run_virtual(feed, config, edit, batches, False)
    assert batched == alone
    statistics = batched[0]
    assert statistics.events == len(stream)


def test_counts_cover_quiet_kinds_filters_unknown_agents_and_churn() -> None:
    config = NotifyConfig(hold=0.0, workspaces=frozenset({"w"}))
    batch: list[FleetEvent] = [
        AgentSpawned("a", "w"),
        StatusChanged("a", "w", status="one"),
        Output("a", "w", text="quiet kind"),
        Output("a", "w", text="quiet kind, known by its class now"),
        StatusChanged("a", "elsewhere", status="filtered workspace"),
        StatusChanged("new", "w", status="an agent not seen before"),
        UnknownEvent("a", "w", unknown_kind="Later"),
        AgentFinished("a", "w", outcome=Outcome.DONE),
        StatusChanged("a", "w", status="late news"),
        AgentSpawned("a", "w"),  # a respawn
    ]
    alone = run_virtual(feed, config, True, [batch], True)
    batched = run_virtual(feed, config, True, [batch], False)
    assert batched == alone
    statistics = batched[0]
    assert (statistics.events, statistics.filtered, statistics.live) == (10, 4, 2)


def test_an_event_that_raises_stops_the_batch_with_what_was_reached_counted() -> None:
    # Outside an event loop a new agent cannot be stamped (anyio has no clock): the spawn
    # raises, as it does through ``handle``. It counts as arrived, not filtered; the events
    # after it are not taken, and the caller gets the error.
    config = NotifyConfig(hold=0.0, workspaces=frozenset({"w"}))
    batch: list[FleetEvent] = [
        Output("a", "w"),
        StatusChanged("a", "elsewhere"),
        AgentSpawned("a", "w"),
        Output("b", "w"),
        StatusChanged("b", "elsewhere"),
    ]
    batched = Notifier(
        "c", RecordingSender(), capabilities=Capabilities(edit=True, max_length=100), config=config
    )
    with pytest.raises(RuntimeError):
        batched.handle_all(batch)
    alone = Notifier(
        "c", RecordingSender(), capabilities=Capabilities(edit=True, max_length=100), config=config
    )
    with pytest.raises(RuntimeError):
        for event in batch:
            alone.handle(event)
    assert batched.statistics() == alone.statistics()
    statistics = batched.statistics()
    assert (statistics.events, statistics.filtered, statistics.live) == (3, 2, 0)
    # the notifier carries on with the next batch
    batched.handle_all([Output("c", "w"), StatusChanged("c", "elsewhere")])
    assert (batched.statistics().events, batched.statistics().filtered) == (5, 4)
