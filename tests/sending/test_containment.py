"""Nothing a renderer or a provider raises ends a channel's sender (ADR 0026).

A hypothesis property drives one sender, on virtual time, with renderers and a provider that
raise arbitrary exceptions (``Exception`` subclasses, exception groups, a lone surrogate's
``UnicodeEncodeError``, ``BaseException`` subclasses that are not cancellation), mixed with good
work; afterwards the sender must still be running and must still deliver new work, and every
submission must have had exactly one answer. Cancellation and the process being told to stop
are never swallowed: those tests follow the property.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio
import pytest
from bridge_slack import SLACK_BUDGET
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge_core.provider import (
    Capabilities,
    ChatProvider,
    LengthUnit,
    MessageRef,
    MessageRejected,
    ProviderError,
    RateLimited,
    TransportError,
)
from bridge_core.sending import ChannelSender, Edit, Post, Priority, SenderClosed
from bridge_core.sending.containment import must_propagate
from bridge_core.testing.clock import run_virtual
from bridge_core.text import measure


class Abort(BaseException):
    """A plugin's own BaseException: a bug in one piece of work, not a request to stop."""


def _surrogate_measure() -> None:
    measure("agent x\ud800", LengthUnit.UTF16)  # what a Discord or Teams rendering did


RAISERS: list[Callable[[], None]] = [
    _surrogate_measure,
    lambda: (_ for _ in ()).throw(ValueError("bad value")),
    lambda: [][1],  # IndexError
    lambda: {}["k"],  # KeyError
    lambda: 1 / 0,  # ZeroDivisionError
    lambda: (_ for _ in ()).throw(RecursionError("deep")),
    lambda: (_ for _ in ()).throw(ExceptionGroup("two", [ValueError("a"), KeyError("b")])),
    lambda: (_ for _ in ()).throw(Abort("plugin abort")),
    lambda: (_ for _ in ()).throw(BaseExceptionGroup("odd", [Abort("x")])),
    lambda: (_ for _ in ()).throw(RateLimited("slow", retry_after=float("nan"))),
    lambda: (_ for _ in ()).throw(TransportError("reset")),
]

# (what the renderer does, what the provider does): index into RAISERS, or -1 for "works"
STEP = st.tuples(
    st.sampled_from(["submit", "send", "edit"]),
    st.integers(-1, len(RAISERS) - 1),
    st.integers(-1, len(RAISERS) - 1),
    st.floats(0, 3).map(lambda x: round(x, 2)),
)


@dataclass
class ScriptedProvider(ChatProvider):
    """Raises what the test queued for the next call, else delivers and counts."""

    faults: list[Callable[[], None] | None] = field(default_factory=list)
    delivered: list[str] = field(default_factory=list)
    serial: int = 0

    def __post_init__(self) -> None:
        self.name = "scripted"
        self.capabilities = Capabilities(edit=True, max_length=2000, probe=False)

    def _call(self, text: str) -> MessageRef:
        fault = self.faults.pop(0) if self.faults else None
        if fault is not None:
            fault()
        self.serial += 1
        self.delivered.append(text)
        return MessageRef("c", f"m{self.serial}")

    async def post(self, channel: str, text: str, *, thread: str | None = None) -> MessageRef:
        await anyio.sleep(0.01)
        return self._call(text)

    async def edit(self, ref: MessageRef, text: str) -> MessageRef:
        await anyio.sleep(0.01)
        return self._call(text)


def _renderer(raiser: int, text: str) -> Callable[[], str | None]:
    def render() -> str | None:
        if raiser >= 0:
            RAISERS[raiser]()
        return text

    return render


@settings(max_examples=60, deadline=None)
@given(steps=st.lists(STEP, min_size=1, max_size=25), seed=st.integers(0, 9))
def test_the_sender_keeps_serving_whatever_its_work_raises(
    steps: list[tuple[str, int, int, float]], seed: int
) -> None:
    answers: dict[int, list[object]] = {}

    async def main() -> None:
        provider = ScriptedProvider()
        sender = ChannelSender(
            provider, channel="c", budget=SLACK_BUDGET, random=random.Random(seed)
        )

        async def one_send(n: int, op: Post | Edit) -> None:
            try:
                answers[n].append(await sender.send(op, priority=Priority.TERMINAL))
            except ProviderError as error:
                answers[n].append(error)

        async with anyio.create_task_group() as group:
            group.start_soon(sender.run)
            for n, (way, render_fault, provider_fault, gap) in enumerate(steps):
                answers[n] = []
                provider.faults.append(RAISERS[provider_fault] if provider_fault >= 0 else None)
                text = _renderer(render_fault, f"w{n}")
                if way == "send":
                    group.start_soon(one_send, n, Post(text))
                else:
                    edit = MessageRef("c", "m0") if way == "edit" else None
                    sender.submit(n, text=text, edit=edit, on_outcome=answers[n].append)
                await anyio.sleep(gap)
            # Let the chaos settle (back-offs are at most a minute), then prove it still serves.
            await anyio.sleep(600)
            provider.faults.clear()
            after: list[object] = []
            sender.submit("after", text=lambda: "later keyed", on_outcome=after.append)
            ref = await sender.send(Post("later send"))
            await anyio.sleep(120)
            assert isinstance(ref, MessageRef)
            assert len(after) == 1 and isinstance(after[0], MessageRef), after
            assert "later send" in provider.delivered and "later keyed" in provider.delivered
            assert sender.idle
            group.cancel_scope.cancel()

    run_virtual(main)
    for n, got in answers.items():
        way = steps[n][0]
        # keyed work may be answered ``None`` only when it was replaced; no key repeats here
        assert len(got) == 1, (n, steps[n], got)
        if way != "send":
            assert got[0] is not None, (n, steps[n], got)
        # a rendering that raised fails that operation alone, as a refused message
        if steps[n][1] >= 0:
            assert isinstance(got[0], MessageRejected), (n, steps[n], got)


def test_a_sender_whose_renderer_raises_logs_the_channel_and_the_work(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> None:
        provider = ScriptedProvider()
        got: list[object] = []
        async with ChannelSender(provider, channel="c-logged", budget=SLACK_BUDGET) as sender:
            sender.submit(("agent:a\ud800",), text=_renderer(0, "x"), on_outcome=got.append)
            await anyio.sleep(5)
            assert isinstance(got[0], MessageRejected)
            assert await sender.send(Post("next"))
        assert sender.statistics().contained == 1

    run_virtual(main)
    messages = [r.getMessage() for r in caplog.records]
    assert any("c-logged" in m and "agent:a" in m for m in messages), messages


def test_cancellation_and_process_stops_are_never_contained() -> None:
    async def main() -> None:
        seen: list[BaseException] = []
        with anyio.CancelScope() as scope:
            scope.cancel()
            try:
                await anyio.sleep(1)
            except anyio.get_cancelled_exc_class() as cancelled:
                seen.append(cancelled)
                raise
        assert len(seen) == 1 and must_propagate(seen[0])
        for stop in (KeyboardInterrupt(), SystemExit(1), GeneratorExit()):
            assert must_propagate(stop)
            assert must_propagate(BaseExceptionGroup("g", [ValueError("v"), stop]))
        assert not must_propagate(Abort())
        assert not must_propagate(ExceptionGroup("g", [ValueError("v")]))
        assert not must_propagate(BaseExceptionGroup("g", [Abort()]))

    run_virtual(main)


def _interrupt() -> str:
    raise KeyboardInterrupt


@pytest.mark.parametrize("where", ["provider", "renderer"])
def test_a_keyboard_interrupt_in_a_piece_of_work_reaches_the_sender_task(where: str) -> None:
    answered: list[object] = []

    async def main() -> None:
        provider = ScriptedProvider()
        text: str | Callable[[], str | None] = _interrupt
        if where == "provider":
            provider.faults.append(_interrupt)
            text = "x"
        sender = ChannelSender(provider, channel="c", budget=SLACK_BUDGET)
        async with anyio.create_task_group() as group:
            group.start_soon(sender.run)
            sender.submit("k", text=text, on_outcome=answered.append)
            await anyio.sleep(5)

    with pytest.raises((KeyboardInterrupt, BaseExceptionGroup)):
        run_virtual(main)
    # the work it interrupted was answered (the sender stopped), never left hanging
    assert len(answered) == 1 and isinstance(answered[0], SenderClosed), answered


def test_cancelling_the_sender_mid_send_answers_the_waiter_and_ends_the_task() -> None:
    async def main() -> None:
        provider = ScriptedProvider()
        sender = ChannelSender(provider, channel="c", budget=SLACK_BUDGET)
        outcome: list[BaseException] = []

        async def waiter() -> None:
            try:
                await sender.send(Post("x"))
            except SenderClosed as error:
                outcome.append(error)

        async with anyio.create_task_group() as outer:
            with anyio.CancelScope() as scope:
                async with anyio.create_task_group() as group:
                    group.start_soon(sender.run)
                    outer.start_soon(waiter)
                    await anyio.sleep(0.005)  # the provider call is in flight (0.01 s)
                    scope.cancel()
        assert scope.cancelled_caught
        assert len(outcome) == 1
        assert provider.delivered == []

    run_virtual(main)
