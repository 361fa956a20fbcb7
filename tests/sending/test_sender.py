"""The per-channel sender on virtual time, read through the console transcript."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from pathlib import Path

import anyio
import pytest
from bridge_slack import SLACK_BUDGET
from bridge_teams import TEAMS_BUDGET

from bridge_core.provider import (
    Forbidden,
    MessageRef,
    MessageRejected,
    NotFound,
    ProviderError,
    RateLimited,
    SendBudget,
    TransportError,
    Unreachable,
    Window,
)
from bridge_core.providers.console import ConsoleProvider, ConsoleSettings
from bridge_core.sending import (
    BACKOFF_MAX,
    BudgetGate,
    ChannelSender,
    Edit,
    Post,
    Priority,
    SenderClosed,
)
from bridge_core.testing.budget import assert_paced, max_in_window, read_transcript

pytestmark = pytest.mark.anyio
C = "chan"


@pytest.fixture
async def console(tmp_path: Path) -> AsyncIterator[Callable[..., ConsoleProvider]]:
    made: list[ConsoleProvider] = []

    def make(**caps: bool) -> ConsoleProvider:
        provider = ConsoleProvider(
            ConsoleSettings(transcript=tmp_path / "t.jsonl", output="none"), run_prefix="r"
        )
        if caps:
            provider.capabilities = replace(provider.capabilities, **caps)
        made.append(provider)
        return provider

    yield make
    for provider in made:
        await provider.aclose()


def entries(tmp_path: Path):
    path = tmp_path / "t.jsonl"
    return read_transcript(path) if path.exists() else []


async def test_priority_classes_highest_first(tmp_path: Path, console) -> None:
    provider = console()
    budget = SendBudget(burst=1, per_second=1.0, edit_spacing=0.0)
    async with ChannelSender(provider, channel=C, budget=budget) as sender:
        await sender.send(Post("first"))  # spends the burst: the rest queue up
        sender.submit("u", text="update", priority=Priority.UPDATE)
        sender.submit("n", text="new", priority=Priority.NEW)
        reply = sender.send(Post("reply"), priority=Priority.TERMINAL)
        ref = await reply
        assert ref.channel == C
        await anyio.sleep(5)
    assert [(e.t, e.text) for e in entries(tmp_path)] == [
        (0.0, "first"),
        (1.0, "reply"),
        (2.0, "new"),
        (3.0, "update"),
    ]


async def test_same_key_replaces_in_place_and_renders_at_send_time(tmp_path: Path, console) -> None:
    provider = console()
    budget = SendBudget(burst=1, per_second=1.0, edit_spacing=0.0)
    outcomes: list[object] = []
    state = {"n": 0}
    async with ChannelSender(provider, channel=C, budget=budget) as sender:
        await sender.send(Post("first"))
        sender.submit("other", text="other", on_outcome=outcomes.append)
        replaced = [
            sender.submit("k", text=lambda: f"state {state['n']}", on_outcome=outcomes.append)
            for _ in range(100)
        ]
        assert replaced == [False] + [True] * 99
        assert sender.queued == 2
        state["n"] = 42
        await anyio.sleep(5)
        assert sender.statistics().superseded == 99
    got = [(e.t, e.text) for e in entries(tmp_path)]
    assert got == [(0.0, "first"), (1.0, "other"), (2.0, "state 42")]
    assert len(outcomes) == 2 and all(isinstance(o, MessageRef) for o in outcomes)


async def test_rendering_none_sends_nothing(tmp_path: Path, console) -> None:
    provider = console()
    outcomes: list[object] = []
    async with ChannelSender(provider, channel=C, budget=SLACK_BUDGET) as sender:
        sender.submit("k", text=lambda: None, on_outcome=outcomes.append)
        await anyio.sleep(1)
        assert sender.statistics().skipped == 1
    assert outcomes == [None] and entries(tmp_path) == []


async def test_edits_of_one_message_keep_the_spacing(tmp_path: Path, console) -> None:
    provider = console()
    budget = SendBudget(burst=100, per_second=100.0, edit_spacing=2.0)
    async with ChannelSender(provider, channel=C, budget=budget) as sender:
        one = await sender.send(Post("one"))
        two = await sender.send(Post("two"))
        sender.submit("two", text="two v1", edit=two)
        for n in range(5):
            await sender.send(Edit(one, f"one v{n}"), priority=Priority.UPDATE)
    got = [(e.t, e.text) for e in entries(tmp_path)]
    assert got[:2] == [(0.0, "one"), (0.0, "two")]
    # Each message waits for its own spacing only; neither holds the other up.
    assert sorted(got[2:4]) == [(2.0, "one v0"), (2.0, "two v1")]
    assert [t for t, text in got if text.startswith("one v")] == [2.0, 4.0, 6.0, 8.0, 10.0]
    assert_paced(entries(tmp_path), budget)


async def test_rate_limited_with_retry_after_pauses_then_resends(tmp_path: Path, console) -> None:
    provider = console()
    async with ChannelSender(provider, channel=C, budget=SLACK_BUDGET) as sender:
        provider.script_fault(C, RateLimited(retry_after=5.0))
        ref = await sender.send(Post("hello"))
        assert anyio.current_time() == 5.0 and sender.statistics().rate_limit_pauses == 1
        assert provider.text_of(ref.message_id) == "hello"


async def test_backoff_without_retry_after_is_exponential_with_jitter(
    tmp_path: Path, console
) -> None:
    provider = console()
    budget = SendBudget(burst=1000, per_second=1000.0, edit_spacing=0.0)
    for _ in range(8):
        provider.script_fault(C, RateLimited(retry_after=None))
    async with ChannelSender(provider, channel=C, budget=budget, random=random.Random(5)) as sender:
        await sender.send(Post("finally"))
    jitter = random.Random(5)
    expected, t = [], 0.0
    for attempt in range(1, 9):
        expected.append(t)
        base = min(BACKOFF_MAX, 2.0**attempt)
        t += min(BACKOFF_MAX, max(1.0, base / 2 + jitter.random() * base / 2))
    got = entries(tmp_path)
    assert [e.t for e in got[:8]] == pytest.approx(expected, abs=1e-5)
    assert got[-1].t == pytest.approx(t, abs=1e-5) and got[-1].op == "post"
    gaps = [b - a for a, b in zip(expected, [*expected[1:], t], strict=True)]
    assert 1.0 <= gaps[0] <= 2.0 and all(30.0 <= g <= 60.0 for g in gaps[5:])


async def test_transport_error_backs_off_and_is_returned_to_send(tmp_path: Path, console) -> None:
    provider = console()
    budget = SendBudget(burst=1000, per_second=1000.0, edit_spacing=0.0)
    outcomes: list[object] = []
    async with ChannelSender(provider, channel=C, budget=budget, random=random.Random(1)) as sender:
        provider.script_fault(C, TransportError("502"))
        with pytest.raises(TransportError, match="502"):
            await sender.send(Post("reply"))
        provider.script_fault(C, TransportError("timeout"))
        sender.submit("k", text="status", on_outcome=outcomes.append)
        await anyio.sleep(30)
    got = entries(tmp_path)
    assert [e.op for e in got] == ["error", "error", "post"]
    assert got[1].t >= 1.0 and got[2].t - got[1].t >= 2.0  # the second failure backs off longer
    assert len(outcomes) == 1 and isinstance(outcomes[0], MessageRef)


async def test_not_found_goes_back_to_the_submitter(tmp_path: Path, console) -> None:
    provider = console()
    outcomes: list[object] = []
    async with ChannelSender(provider, channel=C, budget=SLACK_BUDGET) as sender:
        ghost = MessageRef(C, "nope")
        with pytest.raises(NotFound):
            await sender.send(Edit(ghost, "x"))
        sender.submit("k", text="y", edit=ghost, on_outcome=outcomes.append)
        await anyio.sleep(3)
        assert sender.healthy and sender.paused_until is None
    assert len(outcomes) == 1 and isinstance(outcomes[0], NotFound)


async def test_forbidden_marks_unhealthy_until_the_recheck(tmp_path: Path, console) -> None:
    provider = console()
    outcomes: list[object] = []
    async with ChannelSender(provider, channel=C, budget=SLACK_BUDGET) as sender:
        provider.block(C)
        with pytest.raises(Forbidden):
            await sender.send(Post("one"))
        assert not sender.healthy and "forbidden" in (sender.health_reason or "")
        with pytest.raises(Forbidden, match="re-check"):
            await sender.send(Post("refused at once"))
        sender.submit("k", text="held", on_outcome=outcomes.append)
        await anyio.sleep(299)
        assert outcomes == [] and not sender.healthy
        await anyio.sleep(2)  # the probe at 300 s still says no
        assert not sender.healthy
        provider.unblock(C)
        await anyio.sleep_until(599.0)
        assert outcomes == []
        await anyio.sleep_until(601.0)
        assert sender.healthy and sender.health_reason is None
        assert sender.statistics().forbidden == 1
    got = entries(tmp_path)
    assert [(e.t, e.op) for e in got] == [(0.0, "error"), (600.0, "post")]
    assert len(outcomes) == 1 and isinstance(outcomes[0], MessageRef)


async def test_forbidden_recheck_without_probe_is_a_real_send(tmp_path: Path, console) -> None:
    provider = console(probe=False)
    async with ChannelSender(provider, channel=C, budget=SLACK_BUDGET) as sender:
        provider.script_fault(C, Forbidden("gone"))
        provider.script_fault(C, Forbidden("still gone"))
        sender.submit("k", text="status")
        await anyio.sleep(700)
        assert sender.healthy
    got = entries(tmp_path)
    assert [(e.t, e.op) for e in got] == [(0.0, "error"), (300.0, "error"), (600.0, "post")]


async def test_unreachable_gives_the_channel_up(tmp_path: Path, console) -> None:
    provider = console()
    outcomes: list[object] = []
    async with ChannelSender(provider, channel=C, budget=SLACK_BUDGET) as sender:
        provider.script_fault(C, Unreachable("channel deleted"))
        with pytest.raises(Unreachable):
            await sender.send(Post("one"))
        assert not sender.healthy and "unreachable" in (sender.health_reason or "")
        sender.submit("k", text="x", on_outcome=outcomes.append)
        await anyio.sleep(1)
        with pytest.raises(Unreachable):
            await sender.send(Post("two"))
    assert len(outcomes) == 1 and isinstance(outcomes[0], Unreachable)
    assert len(entries(tmp_path)) == 1


async def test_stopping_answers_every_queued_submission(tmp_path: Path, console) -> None:
    provider = console()
    outcomes: list[object] = []
    budget = SendBudget(burst=1, per_second=0.01)
    async with ChannelSender(provider, channel=C, budget=budget) as sender:
        for n in range(3):
            sender.submit(n, text="x", on_outcome=outcomes.append)
        await anyio.sleep(1)
    assert isinstance(outcomes[0], MessageRef)
    assert len(outcomes) == 3 and all(isinstance(o, SenderClosed) for o in outcomes[1:])


async def test_teams_hourly_cap_holds_at_full_rate(tmp_path: Path, console) -> None:
    provider = console()
    async with ChannelSender(provider, channel=C, budget=TEAMS_BUDGET) as sender:
        for n in range(1900):
            sender.submit(n, text=f"m{n}")
        await anyio.sleep(3600.0)
    got = entries(tmp_path)
    times = [e.t for e in got]
    assert max_in_window(times, 3600.0) == 1800  # a bare bucket would allow 1,807
    assert max_in_window(times, 1.0) <= 7
    assert_paced(got, TEAMS_BUDGET)


def test_budget_gate_arithmetic() -> None:
    gate = BudgetGate(SendBudget(burst=2, per_second=0.5, windows=(Window(3, 10.0),)))
    assert gate.delay(0.0) == 0.0
    gate.record(0.0)
    gate.record(0.0)
    assert gate.delay(0.0) == pytest.approx(2.0)  # the bucket is empty
    gate.record(2.0)
    assert gate.delay(4.0) == pytest.approx(6.0)  # the window: the send at 0 leaves at 10
    assert gate.delay(10.0) == 0.0


async def test_budget_gate_takes_every_class_alike() -> None:
    """One sender per in-process gate, and it sends its own queue highest class first: no
    headroom to keep (the shared gate keeps one for other gateways' higher classes)."""
    gate = BudgetGate(SendBudget(burst=2, per_second=0.5))
    assert await gate.reserve(0.0, priority=Priority.UPDATE) == 0.0
    assert await gate.reserve(0.0, priority=Priority.UPDATE) == 0.0  # the whole burst
    assert await gate.reserve(0.0, priority=Priority.TERMINAL) == pytest.approx(2.0)


async def test_rejects_bad_arguments(tmp_path: Path, console) -> None:
    provider = console()
    with pytest.raises(ValueError, match="recheck_interval"):
        ChannelSender(provider, channel=C, budget=SLACK_BUDGET, recheck_interval=0)
    sender = ChannelSender(provider, channel=C, budget=SLACK_BUDGET)
    with pytest.raises(ValueError, match="priority"):
        sender.submit("k", text="x", priority=7)


async def test_a_failing_callback_does_not_stop_the_channel(
    tmp_path: Path, console, caplog: pytest.LogCaptureFixture
) -> None:
    provider = console()

    def broken(result: object) -> None:
        raise RuntimeError("submitter bug")

    async with ChannelSender(provider, channel=C, budget=SLACK_BUDGET) as sender:
        sender.submit("k", text="one", on_outcome=broken)
        ref = await sender.send(Post("two"))
        assert provider.text_of(ref.message_id) == "two"
    assert sorted(e.text for e in entries(tmp_path)) == ["one", "two"]
    assert "submitter bug" in caplog.text


async def test_a_failing_probe_keeps_the_channel_unhealthy(tmp_path: Path, console) -> None:
    provider = console()

    async def probe(channel: str) -> bool | None:
        raise TimeoutError("probe timed out")

    provider.probe = probe  # type: ignore[method-assign]
    async with ChannelSender(provider, channel=C, budget=SLACK_BUDGET) as sender:
        provider.script_fault(C, Forbidden("removed"))
        sender.submit("k", text="held")
        await anyio.sleep(301)
        assert not sender.healthy and "probe timed out" in (sender.health_reason or "")
    assert [e.op for e in entries(tmp_path)] == ["error"]


async def test_a_rejected_message_fails_alone_and_the_channel_stays_healthy(
    tmp_path: Path, console
) -> None:
    provider = console()
    outcomes: list[object] = []
    async with ChannelSender(provider, channel=C, budget=SLACK_BUDGET) as sender:
        provider.script_fault(C, MessageRejected("msg_too_long"))
        with pytest.raises(MessageRejected, match="msg_too_long"):
            await sender.send(Post("far too long"))
        assert sender.healthy and sender.health_reason is None
        assert sender.paused_until is None, "a refused message must not pause the channel"
        ref = await sender.send(Post("the next reply"))
        assert anyio.current_time() == 0.0
        provider.script_fault(C, MessageRejected("invalid_blocks"))
        sender.submit("k", text="refused update", edit=ref, on_outcome=outcomes.append)
        await anyio.sleep(3)  # the edit waits out the spacing after the post, then is refused
        sender.submit("other", text="another agent", on_outcome=outcomes.append)
        await anyio.sleep(1)
        assert sender.healthy and sender.statistics().rejected == 2
        assert sender.statistics().backoffs == 0 and sender.statistics().unreachable == 0
    assert [type(o) for o in outcomes] == [MessageRejected, MessageRef]
    assert [(e.t, e.op, e.text) for e in entries(tmp_path)] == [
        (0.0, "error", "far too long"),
        (0.0, "post", "the next reply"),
        (2.0, "error", "refused update"),
        (3.0, "post", "another agent"),
    ]


async def test_a_rejection_is_not_a_channel_failure_for_the_backoff(
    tmp_path: Path, console
) -> None:
    provider = console()
    budget = SendBudget(burst=1000, per_second=1000.0, edit_spacing=0.0)
    async with ChannelSender(provider, channel=C, budget=budget, random=random.Random(3)) as sender:
        for n in range(5):
            provider.script_fault(C, MessageRejected(f"refused {n}"))
            with pytest.raises(MessageRejected):
                await sender.send(Post(f"bad {n}"))
        provider.script_fault(C, TransportError("503"))
        sender.submit("k", text="status")
        await anyio.sleep(120)
    got = entries(tmp_path)
    assert [e.op for e in got] == ["error"] * 6 + ["post"]
    # The transport error after five refusals backs off as a first failure: 1 to 2 s.
    assert 1.0 <= got[-1].t - got[-2].t <= 2.0


class RefusesText(ConsoleProvider):
    """Refuses posts of one text a number of times (scripted just in time, so other texts sent
    meanwhile are not affected), with ``MessageRejected`` or, given ``error``, another error."""

    def __init__(
        self, path: Path, *, text: str, times: int, error: type[ProviderError] = MessageRejected
    ) -> None:
        super().__init__(ConsoleSettings(transcript=path, output="none"), run_prefix="r")
        self.refused_text, self.refusals, self.error = text, times, error

    async def post(self, channel: str, text: str, *, thread: str | None = None) -> MessageRef:
        if text == self.refused_text and self.refusals > 0:
            self.refusals -= 1
            self.script_fault(channel, self.error("refused"))
        return await super().post(channel, text, thread=thread)


@pytest.mark.parametrize("error", [MessageRejected, NotFound])
async def test_a_refused_key_posts_again_no_sooner_than_the_edit_spacing(
    tmp_path: Path, error: type[ProviderError]
) -> None:
    # NotFound on a post is no deleted message but no place to post: spaced like a refusal.
    provider = RefusesText(tmp_path / "t.jsonl", text="v", times=3, error=error)
    budget = SendBudget(burst=100, per_second=100.0, edit_spacing=2.0)
    outcomes: list[object] = []
    async with ChannelSender(provider, channel=C, budget=budget) as sender:
        # A submitter that resubmits the moment it hears of a refusal (the spin to prevent).
        def again(outcome: object) -> None:
            outcomes.append(outcome)
            if isinstance(outcome, error):
                sender.submit("k", text="v", on_outcome=again)

        sender.submit("k", text="v", on_outcome=again)
        await anyio.sleep(0.5)
        sender.submit("other", text="unrelated")
        await anyio.sleep(10)
    await provider.aclose()
    got = entries(tmp_path)
    assert [(e.t, e.op) for e in got if e.text == "v"] == [
        (0.0, "error"),
        (2.0, "error"),
        (4.0, "error"),
        (6.0, "post"),
    ]
    assert [e.t for e in got if e.text == "unrelated"] == [0.5]  # other keys are not held up
    assert [type(o) for o in outcomes] == [error] * 3 + [MessageRef]
