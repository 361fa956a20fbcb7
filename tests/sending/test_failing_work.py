"""One piece of keyed work that fails with a transport error on every try (a body the platform
answers 500 to, a provider bug on one message) must not hold up its priority class: it is
retried from the tail of its class, so replies and other agents' final states go first, and it
is refused as ``MessageRejected`` after ``POISON_STRIKES`` failures with other work delivered
between its tries (ADR 0026: a fault that repeats cannot stop the channel). A channel-wide
outage delivers nothing, so there the work is retried, never refused (ADR 0013)."""

from __future__ import annotations

import random
from pathlib import Path

import anyio
import pytest
from bridge_slack import SLACK_BUDGET

from bridge_core.provider import MessageRef, MessageRejected, TransportError
from bridge_core.providers.console import ConsoleProvider, ConsoleSettings
from bridge_core.sending import ChannelSender, Post, Priority
from bridge_core.sending.failures import POISON_STRIKES
from bridge_core.sending.queue import Outcome

pytestmark = pytest.mark.anyio
C = "chan"


class FailsText(ConsoleProvider):
    """Fails every post of a text holding ``poison`` with ``error``; with ``down`` set, every
    post fails with a transport error (an outage)."""

    def __init__(self, path: Path, error: BaseException) -> None:
        super().__init__(ConsoleSettings(transcript=path, output="none"), run_prefix="r")
        self.error, self.down, self.tries = error, False, 0

    async def post(self, channel: str, text: str, *, thread: str | None = None) -> MessageRef:
        if self.down:
            raise TransportError("connection refused")
        if "poison" in text:
            self.tries += 1
            raise self.error
        return await super().post(channel, text, thread=thread)


@pytest.mark.parametrize("error", [TransportError("HTTP 500 for this body"), KeyError("ts")])
async def test_work_that_always_fails_does_not_hold_up_its_class(
    tmp_path: Path, error: BaseException
) -> None:
    provider = FailsText(tmp_path / "t.jsonl", error)
    poisoned: list[Outcome] = []
    others: list[Outcome] = []
    sender = ChannelSender(provider, channel=C, budget=SLACK_BUDGET, random=random.Random(1))
    async with sender:
        sender.submit("poison", text="poison", priority=Priority.TERMINAL,
                      on_outcome=poisoned.append)  # fmt: skip
        await anyio.sleep(0.5)  # it failed once and waits out its back-off
        with anyio.fail_after(5):  # behind it for ever, before
            assert isinstance(await sender.send(Post("a reply")), MessageRef)
        for n in range(60):  # other agents' final states, one every 10 s
            sender.submit(n, text=f"final {n}", priority=Priority.TERMINAL,
                          on_outcome=others.append)  # fmt: skip
            await anyio.sleep(10)
        assert sender.idle
    await provider.aclose()
    assert len(others) == 60 and all(isinstance(o, MessageRef) for o in others)
    assert len(poisoned) == 1 and isinstance(poisoned[0], MessageRejected)
    # A strike needs a delivery since its previous failure; failures between strikes back off.
    assert POISON_STRIKES < provider.tries < 4 * POISON_STRIKES


async def test_failing_work_alone_is_retried_not_refused(tmp_path: Path) -> None:
    # Nothing else delivered between its tries: it cannot be told from an outage.
    provider = FailsText(tmp_path / "t.jsonl", TransportError("HTTP 500"))
    poisoned: list[Outcome] = []
    async with ChannelSender(provider, channel=C, budget=SLACK_BUDGET) as sender:
        sender.submit("poison", text="poison", on_outcome=poisoned.append)
        await anyio.sleep(1800)
        assert poisoned == [] and sender.queued == 1 and provider.tries > POISON_STRIKES + 1
    await provider.aclose()


async def test_an_outage_retries_keyed_work_and_never_refuses_it(tmp_path: Path) -> None:
    provider = FailsText(tmp_path / "t.jsonl", TransportError("unused"))
    provider.down = True
    outcomes: list[Outcome] = []
    async with ChannelSender(provider, channel=C, budget=SLACK_BUDGET) as sender:
        for n in range(3):
            sender.submit(n, text=f"final {n}", priority=Priority.TERMINAL,
                          on_outcome=outcomes.append)  # fmt: skip
        await anyio.sleep(1800)
        assert outcomes == [] and sender.queued == 3
        provider.down = False
        await anyio.sleep(120)
    await provider.aclose()
    assert len(outcomes) == 3 and all(isinstance(o, MessageRef) for o in outcomes)
