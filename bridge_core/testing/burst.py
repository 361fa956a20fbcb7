"""The seed's scenario B, a burst of 30 agents, driven through a real provider.

For provider authors: run the core's real ``Notifier`` and ``ChannelSender`` against your
provider (talking to your fake platform over real HTTP) and get back what the sender asked the
provider to do, to check against the platform's budget::

    budget = compress_budget(MY_BUDGET, 20.0)
    result = await run_scenario_b(provider, channel="C1", budget=budget, speed=20.0)
    assert result.violations(tolerance=0.005) == []
    assert len(result.posts) == 3  # one summary, two failure posts

Scenario B (seed): 30 agents spawn within 2 s, two of them (``b07``, ``b19``) crash at 30 s,
the other 28 finish one every 3 s from 31 s. The channel should end with one summary (``28
done``, ``2 failed``) and one post per crash.

Real I/O cannot run on a virtual clock, so time is compressed instead: ``speed`` divides every
duration of the scenario and of the notifier's config; pass a budget compressed by the same
factor (``compress_budget``), and compress the fake platform's own limits likewise. The
recorded times are anyio's clock when each call left the sender (``TimedProvider``), relative to
the scenario's start, so a check against the budget is free of network jitter; compare them to
a fake's arrival stamps with ``BurstResult.wall_start`` (``time.monotonic()`` at the start).

The provider is closed when the scenario ends. Exception hierarchy: none of its own;
``TimeoutError`` when the notifier and sender are not idle ``settle_timeout`` seconds after the
last event, and whatever the provider raised that the sender does not handle.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import anyio

from bridge_core.events import AgentFinished, AgentSpawned, Outcome
from bridge_core.notify import Notifier, NotifyConfig
from bridge_core.provider import ChatProvider, MessageRef, ProviderError, SendBudget, Window
from bridge_core.sending import ChannelSender
from bridge_core.testing.budget import (
    TranscriptEntry,
    Violation,
    check_budget,
    check_edit_spacing,
)

__all__ = [
    "AGENTS",
    "CRASHED",
    "SEED_NOTIFY",
    "BurstResult",
    "TimedProvider",
    "compress_budget",
    "compress_notify",
    "run_scenario_b",
]

AGENTS = tuple(f"b{i:02}" for i in range(30))
CRASHED = ("b07", "b19")
SEED_NOTIFY = NotifyConfig()  # the seed's defaults: hold 2 s, threshold 5, window 10 s
_WORKSPACE = "w1"
_SPAWN_GAP = 0.06  # seconds between spawns: 30 of them within 2 s
_CRASH_AT = 30.0
_FIRST_DONE_AT = 31.0
_DONE_GAP = 3.0
_POLL = 0.05  # the notifier and sender offer no idle event to wait on


def compress_budget(budget: SendBudget, speed: float) -> SendBudget:
    """``budget`` with its rate, windows and edit spacing ``speed`` times faster."""
    return SendBudget(
        burst=budget.burst,
        per_second=budget.per_second * speed,
        windows=tuple(Window(w.limit, w.seconds / speed) for w in budget.windows),
        edit_spacing=budget.edit_spacing / speed,
    )


def compress_notify(config: NotifyConfig, speed: float) -> NotifyConfig:
    """``config`` with its hold, window and memory ``speed`` times shorter."""
    return NotifyConfig(
        hold=config.hold / speed,
        threshold=config.threshold,
        window=config.window / speed,
        kinds=config.kinds,
        workspaces=config.workspaces,
        forget_after=config.forget_after / speed,
        summary_names=config.summary_names,
    )


class TimedProvider(ChatProvider):
    """A provider wrapped to note when each call left the sender, failed attempts included.

    Each entry's ``t`` is anyio's clock read just before the call, minus ``start``; its ``text``
    is the text sent, or for an ``error`` entry the error's class name (``RateLimited``).
    """

    def __init__(self, inner: ChatProvider, *, channel: str) -> None:
        self.inner = inner
        self.name = inner.name
        self.capabilities = inner.capabilities
        self.channel = channel
        self.start = 0.0
        self.entries: list[TranscriptEntry] = []

    def _note(self, at: float, op: str, message_id: str | None, text: str) -> None:
        self.entries.append(TranscriptEntry(at - self.start, op, self.channel, message_id, text))

    async def post(self, channel: str, text: str, *, thread: str | None = None) -> MessageRef:
        at = anyio.current_time()
        try:
            ref = await self.inner.post(channel, text, thread=thread)
        except ProviderError as exc:
            self._note(at, "error", None, type(exc).__name__)
            raise
        self._note(at, "post", ref.message_id, text)
        return ref

    async def edit(self, ref: MessageRef, text: str) -> MessageRef:
        at = anyio.current_time()
        try:
            edited = await self.inner.edit(ref, text)
        except ProviderError as exc:
            self._note(at, "error", ref.message_id, type(exc).__name__)
            raise
        self._note(at, "edit", ref.message_id, text)
        return edited

    async def probe(self, channel: str) -> bool | None:
        return await self.inner.probe(channel)

    def escape(self, text: str) -> str:
        return self.inner.escape(text)

    async def aclose(self) -> None:
        await self.inner.aclose()


@dataclass(frozen=True, slots=True)
class BurstResult:
    """What one run of scenario B asked of the provider.

    ``calls``: every post, edit and failed attempt, in the order the sender made them (times in
    compressed seconds from the start). ``delivered``: agents whose terminal state reached the
    channel. ``start``: anyio's clock at the start; ``wall_start``: ``time.monotonic()`` then.
    """

    calls: list[TranscriptEntry]
    budget: SendBudget
    delivered: dict[str, float] = field(default_factory=dict)
    start: float = 0.0
    wall_start: float = 0.0

    @property
    def posts(self) -> list[TranscriptEntry]:
        return [c for c in self.calls if c.op == "post"]

    @property
    def errors(self) -> list[TranscriptEntry]:
        return [c for c in self.calls if c.op == "error"]

    @property
    def summary_text(self) -> str:
        """The last text written to the first message posted (the burst's summary)."""
        summary_id = self.posts[0].message_id
        writes = [c for c in self.calls if c.message_id == summary_id and c.op != "error"]
        return writes[-1].text

    def violations(self, *, tolerance: float) -> list[Violation]:
        """Breaches of the budget and of its edit spacing, allowing ``tolerance`` seconds for
        the gap between the sender's clock reading and the wrapper's."""
        return [
            *check_budget(self.calls, self.budget, tolerance=tolerance),
            *check_edit_spacing(self.calls, self.budget.edit_spacing, tolerance=tolerance),
        ]


async def run_scenario_b(
    provider: ChatProvider,
    *,
    channel: str,
    budget: SendBudget,
    speed: float,
    notify: NotifyConfig = SEED_NOTIFY,
    script: Sequence[tuple[float, Callable[[], object]]] = (),
    seed: int = 1,
    settle_timeout: float = 30.0,
) -> BurstResult:
    """Run scenario B ``speed`` times faster through a real notifier and sender on ``provider``.

    ``budget`` is the sender's budget, already compressed (``compress_budget``); ``notify`` is
    the notifier's config in uncompressed seconds. ``script`` lists ``(scenario seconds,
    action)`` pairs run at those (uncompressed) times, to script the fake platform midway (a
    429 at 20 s, say). ``seed`` seeds the sender's jitter.
    """
    if speed <= 0:
        raise ValueError(f"speed must be positive, got {speed}")
    timed = TimedProvider(provider, channel=channel)
    sender = ChannelSender(timed, channel=channel, budget=budget, random=random.Random(seed))
    delivered: dict[str, float] = {}
    notifier = Notifier(
        channel,
        sender,
        capabilities=provider.capabilities,
        config=compress_notify(notify, speed),
        escape=provider.escape,
        on_terminal_delivered=delivered.__setitem__,
    )
    events: list[tuple[float, Callable[[], object]]] = [
        *((i * _SPAWN_GAP, _spawn(notifier, name)) for i, name in enumerate(AGENTS)),
        *((_CRASH_AT, _crash(notifier, name)) for name in CRASHED),
        *(
            (_FIRST_DONE_AT + n * _DONE_GAP, _done(notifier, name))
            for n, name in enumerate(a for a in AGENTS if a not in CRASHED)
        ),
        *script,
    ]
    events.sort(key=lambda event: event[0])  # stable: same-time events keep their order
    async with timed, anyio.create_task_group() as group:
        group.start_soon(sender.run)
        group.start_soon(notifier.run)
        start = timed.start = anyio.current_time()
        wall_start = time.monotonic()
        for at, action in events:
            await anyio.sleep_until(start + at / speed)
            action()
        with anyio.fail_after(settle_timeout):
            while not (notifier.idle and sender.idle):  # noqa: ASYNC110 (no event to wait on)
                await anyio.sleep(_POLL)
        group.cancel_scope.cancel()
    return BurstResult(
        calls=sorted(timed.entries, key=lambda entry: entry.t),
        budget=budget,
        delivered=delivered,
        start=start,
        wall_start=wall_start,
    )


def _spawn(notifier: Notifier, name: str) -> Callable[[], None]:
    return lambda: notifier.handle(AgentSpawned(name, _WORKSPACE))


def _crash(notifier: Notifier, name: str) -> Callable[[], None]:
    return lambda: notifier.handle(
        AgentFinished(name, _WORKSPACE, outcome=Outcome.CRASHED, turns=3)
    )


def _done(notifier: Notifier, name: str) -> Callable[[], None]:
    return lambda: notifier.handle(AgentFinished(name, _WORKSPACE, outcome=Outcome.DONE, cost=0.1))
