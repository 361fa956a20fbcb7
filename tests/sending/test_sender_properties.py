"""Property tests of the sender alone: every submission gets exactly one answer, the budget holds.

Random mixes of ``send()`` calls (the ledger's way), keyed ``submit()`` calls that supersede each
other (the notifier's way) and scripted provider faults, on virtual time.
"""

from __future__ import annotations

import random
import tempfile
from pathlib import Path

import anyio
from bridge_discord import DISCORD_BUDGET
from bridge_slack import SLACK_BUDGET
from bridge_teams import TEAMS_BUDGET
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge_core.provider import (
    Forbidden,
    MessageRef,
    NotFound,
    ProviderError,
    RateLimited,
    SendBudget,
    TransportError,
    Unreachable,
)
from bridge_core.providers.console import ConsoleProvider, ConsoleSettings
from bridge_core.sending import ChannelSender, Edit, Post, Priority
from bridge_core.testing.budget import assert_paced, read_transcript
from bridge_core.testing.clock import run_virtual

ACTION = st.tuples(
    st.floats(0, 4).map(lambda x: round(x, 2)),
    st.sampled_from(["submit", "submit", "submit", "send", "edit", "fault"]),
    st.integers(0, 4),  # key, or fault kind
    st.sampled_from(list(Priority)),
)


def fault(kind: int) -> ProviderError:
    return [
        RateLimited(retry_after=3.0),
        RateLimited(retry_after=None),
        TransportError("reset"),
        NotFound("gone"),
        Forbidden("removed"),
    ][kind]


@settings(max_examples=30, deadline=None)
@given(
    actions=st.lists(ACTION, max_size=40),
    budget=st.sampled_from([SLACK_BUDGET, DISCORD_BUDGET, TEAMS_BUDGET]),
    give_up=st.booleans(),
)
def test_every_submission_is_answered_once_and_the_budget_holds(
    actions: list[tuple[float, str, int, Priority]], budget: SendBudget, give_up: bool
) -> None:
    answers: dict[int, list[object]] = {}
    owed: set[int] = set()
    sends: list[object] = []

    async def main(path: Path) -> None:
        provider = ConsoleProvider(ConsoleSettings(transcript=path, output="none"))
        sender = ChannelSender(provider, channel="c", budget=budget, random=random.Random(3))

        async def one_send(op: Post | Edit, priority: Priority) -> None:
            try:
                sends.append(await sender.send(op, priority=priority))
            except ProviderError as error:
                sends.append(error)

        async with anyio.create_task_group() as group:
            group.start_soon(sender.run)
            first = await sender.send(Post("first"))
            for n, (gap, action, value, priority) in enumerate(actions):
                await anyio.sleep(gap)
                if action == "fault":
                    provider.script_fault("c", fault(value))
                elif action == "submit":
                    answers[n] = []
                    replaced = sender.submit(
                        ("k", value),
                        text=f"v{n}",
                        edit=first if value % 2 else None,
                        priority=priority,
                        on_outcome=answers[n].append,
                    )
                    if replaced:  # the queued submission of that key is answered by this one
                        owed.difference_update(
                            m for m in list(owed) if actions[m][2] == value and not answers[m]
                        )
                    owed.add(n)
                else:
                    op = Edit(first, f"e{n}") if action == "edit" else Post(f"p{n}")
                    group.start_soon(one_send, op, priority)
            if give_up:
                provider.script_fault("c", Unreachable("channel deleted"))
                sender.submit("last", text="last")
            expected = sum(1 for _, action, _, _ in actions if action in ("send", "edit"))
            with anyio.fail_after(10_000):
                while not sender.idle or len(sends) < expected:  # noqa: ASYNC110
                    await anyio.sleep(1.0)
            group.cancel_scope.cancel()
        await provider.aclose()

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "t.jsonl"
        run_virtual(main, path)
        entries = read_transcript(path) if path.exists() else []
    assert_paced(entries, budget)
    for n in owed:
        assert len(answers[n]) == 1, (n, answers[n])
        assert isinstance(answers[n][0], (MessageRef, ProviderError, type(None)))
    for n, got in answers.items():
        assert len(got) <= 1, (n, got)
    assert len(sends) == sum(1 for _, action, _, _ in actions if action in ("send", "edit"))
