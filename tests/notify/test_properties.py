"""Property tests: random fleets and random provider faults, judged only by the transcript.

For any event stream and any faults: sends never exceed the budget in any window (the hourly
cap included); writes to one message are never closer than the spacing; once the faults stop,
every agent's terminal state is delivered; and the last text of every message shows its agent's
latest state (for summaries: the counts of their members).
"""

from __future__ import annotations

import random
import re
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import anyio
from bridge_discord import DISCORD_BUDGET
from bridge_slack import SLACK_BUDGET
from bridge_teams import TEAMS_BUDGET
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
from bridge_core.notify import Notifier
from bridge_core.provider import (
    Forbidden,
    MessageRef,
    NotFound,
    ProviderError,
    RateLimited,
    SendBudget,
    TransportError,
)
from bridge_core.providers.console import ConsoleProvider, ConsoleSettings
from bridge_core.sending import ChannelSender
from bridge_core.testing.budget import TranscriptEntry, assert_paced, read_transcript
from bridge_core.testing.clock import run_virtual

AGENT_LINE = re.compile(r"^\S+ (\w+) \[(\w+)\] ")
SUMMARY_LINE = re.compile(r"^\S+ (\d+) agents in \[(\w+)\]: (.*)\nagents: (.*)$", re.S)


@dataclass(frozen=True)
class Life:
    name: str
    workspace: str
    spawn: float
    changes: tuple[float, ...]
    end: tuple[float, str] | None  # (gap after the last change, outcome value or "gone")
    noise: bool = False  # a repeated spawn mid-life and a late AgentGone: both change nothing


@st.composite
def lives(draw: st.DrawFn) -> list[Life]:
    count = draw(st.integers(1, 9))
    out = []
    for n in range(count):
        spawn = draw(st.floats(0, 40, allow_nan=False).map(lambda x: round(x, 1)))
        gaps = draw(st.lists(st.floats(0, 6).map(lambda x: round(x, 2)), max_size=12))
        changes, t = [], spawn
        for gap in gaps:
            t += gap
            changes.append(t)
        end = draw(
            st.none()
            | st.tuples(
                st.floats(0, 20).map(lambda x: round(x, 1)),
                st.sampled_from([o.value for o in Outcome] + ["gone"]),
            )
        )
        ws = draw(st.sampled_from(["w0", "w1"]))
        life = Life(f"ag{n}", ws, spawn, tuple(changes), end, draw(st.booleans()))
        out.append(life)
        if end is not None and draw(st.booleans()):
            # A second life of the same name, in the other workspace (so messages and summary
            # places tell the lives apart), after the first one's late AgentGone.
            ended = (changes[-1] if changes else spawn) + end[0]
            again = ended + draw(st.floats(2, 30).map(lambda x: round(x, 1)))
            out.append(
                Life(
                    life.name,
                    "w1" if ws == "w0" else "w0",
                    again,
                    (again + 1.0,),
                    draw(st.none() | st.just((3.0, "done"))),
                )
            )
    return out


FAULTS = st.lists(
    st.tuples(
        st.floats(0, 80).map(lambda x: round(x, 1)),
        st.sampled_from(
            ["rate_limited", "rate_limited_bare", "transport", "not_found", "forbidden"]
        ),
        st.floats(0.5, 20).map(lambda x: round(x, 1)),
    ),
    max_size=6,
)


def build(kind: str, retry_after: float) -> ProviderError:
    if kind == "rate_limited":
        return RateLimited(retry_after=retry_after)
    if kind == "rate_limited_bare":
        return RateLimited(retry_after=None)
    if kind == "transport":
        return TransportError("502")
    if kind == "not_found":
        return NotFound("deleted")
    return Forbidden("removed")


def timeline(fleet: list[Life]) -> list[tuple[float, int, FleetEvent]]:
    items: list[tuple[float, int, FleetEvent]] = []
    seq = 0
    for life in fleet:
        items.append((life.spawn, seq, AgentSpawned(life.name, life.workspace)))
        seq += 1
        for k, t in enumerate(life.changes):
            items.append((t, seq, StatusChanged(life.name, life.workspace, status=f"st{k}")))
            seq += 1
        if life.end is not None:
            last = life.changes[-1] if life.changes else life.spawn
            gap, what = life.end
            event: FleetEvent
            if what == "gone":
                event = AgentGone(life.name, life.workspace, reason="bye")
            else:
                event = AgentFinished(
                    life.name, life.workspace, outcome=Outcome(what), cost=1.0, turns=3
                )
            items.append((last + gap, seq, event))
            seq += 1
            if life.noise and what != "gone":
                items.append((last + gap + 1.0, seq, AgentGone(life.name, life.workspace)))
                seq += 1
        if life.noise and life.changes:
            # Ordered before anything else at that time, so it can never follow the end.
            middle = life.changes[len(life.changes) // 2]
            items.append((middle, -2, AgentSpawned(life.name, life.workspace, title="again")))
    return sorted(items, key=lambda item: (item[0], item[1]))


class DeletingConsole(ConsoleProvider):
    """A ``not_found`` fault is a deleted message, so only an edit can meet it: the next edit when
    no other fault is pending. A post answered ``NotFound`` means there is no channel or thread
    to post in, which the notifier reads as a refusal (tests/notify/test_not_found_posts.py)."""

    deletions = 0

    async def edit(self, ref: MessageRef, text: str) -> MessageRef:
        if self.deletions and not self.pending_faults(ref.channel):
            self.deletions -= 1
            self.script_fault(ref.channel, NotFound("deleted"))
        return await super().edit(ref, text)


def simulate(
    fleet: list[Life],
    faults: list[tuple[float, str, float]],
    budget: SendBudget,
    *,
    edit: bool,
    path: Path,
) -> list[TranscriptEntry]:
    async def main() -> None:
        provider = DeletingConsole(ConsoleSettings(transcript=path, output="none"))
        provider.capabilities = replace(provider.capabilities, edit=edit)
        sender = ChannelSender(provider, channel="c", budget=budget, random=random.Random(0))
        notifier = Notifier("c", sender, capabilities=provider.capabilities)
        schedule: list[tuple[float, int, object]] = [
            (t, i, event) for t, i, event in timeline(fleet)
        ]
        schedule += [(t, -1, build(k, r)) for t, k, r in faults]
        schedule.sort(key=lambda item: (item[0], item[1]))
        async with anyio.create_task_group() as group:
            group.start_soon(sender.run)
            group.start_soon(notifier.run)
            for t, _, item in schedule:
                await anyio.sleep_until(t)
                if isinstance(item, NotFound):
                    provider.deletions += 1
                elif isinstance(item, ProviderError):
                    provider.script_fault("c", item)
                else:
                    assert isinstance(item, FleetEvent)
                    notifier.handle(item)
            with anyio.fail_after(20_000):
                while not (notifier.idle and sender.idle):  # noqa: ASYNC110
                    await anyio.sleep(1.0)
            group.cancel_scope.cancel()
        await provider.aclose()

    run_virtual(main)
    return read_transcript(path) if path.exists() else []


def final_text(life: Life) -> str:
    if life.end is not None:
        what = life.end[1]
        return "gone: bye" if what == "gone" else f"{what}: cost $1.00, 3 turns"
    return f"running: st{len(life.changes) - 1}" if life.changes else "running: started"


def check(fleet: list[Life], entries: list[TranscriptEntry], budget: SendBudget, *, edit: bool):
    assert_paced(entries, budget)
    deleted = {e.message_id for e in entries if e.op == "error" and e.error == "NotFound"}
    last: dict[str, TranscriptEntry] = {}
    for entry in entries:
        if entry.op != "error" and entry.message_id not in deleted:
            assert entry.message_id is not None
            last[entry.message_id] = entry
    by_key = {(life.name, life.workspace): life for life in fleet}
    own: dict[tuple[str, str], list[str]] = {}
    in_summary: set[tuple[str, str]] = set()
    for message in last.values():
        summary = SUMMARY_LINE.match(message.text)
        if summary:
            names = summary.group(4).split(", ")
            assert len(names) == int(summary.group(1))  # at most 9 agents: all listed
            keys = [(name, summary.group(2)) for name in names]
            in_summary.update(keys)
            members = [by_key[key] for key in keys]
            ends = [m.end[1] if m.end else "running" for m in members]
            if edit:
                counts = summary.group(3)
                assert f"{ends.count('done')} done" in counts, (counts, ends)
                assert f"{ends.count('running')} running" in counts, (counts, ends)
                failed = ends.count("failed") + ends.count("crashed")
                assert f"{failed} failed" in counts, (counts, ends)
            continue
        match = AGENT_LINE.match(message.text)
        assert match, message.text
        own.setdefault((match.group(1), match.group(2)), []).append(message.text)
    for life in fleet:
        key = (life.name, life.workspace)
        texts = own.get(key, [])
        failure = life.end is not None and life.end[1] in ("failed", "crashed")
        if life.end is not None and (failure or not edit or key not in in_summary):
            # The terminal state was delivered as the agent's own message.
            assert any(final_text(life) in t for t in texts), (life, texts)
        if edit and key not in in_summary:
            for text in texts:  # every live message of it shows its latest state
                assert final_text(life) in text, (life, text)


@settings(max_examples=25, deadline=None)
@given(
    fleet=lives(),
    faults=FAULTS,
    budget=st.sampled_from([SLACK_BUDGET, DISCORD_BUDGET, TEAMS_BUDGET]),
    edit=st.booleans(),
)
def test_random_fleets_under_random_faults(
    fleet: list[Life], faults: list[tuple[float, str, float]], budget: SendBudget, edit: bool
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        entries = simulate(fleet, faults, budget, edit=edit, path=Path(folder) / "t.jsonl")
    check(fleet, entries, budget, edit=edit)


@settings(max_examples=4, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_hourly_cap_under_a_saturating_stream(seed: int) -> None:
    rng = random.Random(seed)
    fleet = [
        Life(
            f"ag{n}",
            "w0",
            n * 3.0,
            tuple(sorted(rng.uniform(30, 3500) for _ in range(100))),
            (1.0, "done"),
        )
        for n in range(8)
    ]
    faults = [(rng.uniform(100, 3000), "rate_limited", rng.uniform(1, 30)) for _ in range(3)]
    with tempfile.TemporaryDirectory() as folder:
        entries = simulate(fleet, faults, TEAMS_BUDGET, edit=True, path=Path(folder) / "t.jsonl")
    check(fleet, entries, TEAMS_BUDGET, edit=True)
