"""The per-channel sender: every write to one channel goes through one ``ChannelSender``.

Notifications and replies meet here, so together they never exceed the channel's budget. The
sender sends one operation at a time, highest priority class first (``Priority``), pacing ahead
of the platform with a ``BudgetGate`` (token bucket plus sliding windows) and keeping writes to
one message at least ``budget.edit_spacing`` apart. Gateways that share a channel pass a shared
``gate=`` (any ``SendGate``) so that together they stay within the one budget.

Two ways in:

- ``await sender.send(op, priority=...)`` waits for the outcome and returns the ``MessageRef`` or
  raises the ``ProviderError`` (the delivery ledger's way; ``RateLimited`` is waited out and
  retried here unless the caller left, every other error is the caller's to read).
- ``sender.submit(key, text=..., edit=ref, priority=..., on_outcome=...)`` never blocks: work with
  the same ``key`` still queued is replaced in place, never queued behind itself, and the text is
  rendered when it leaves the queue (the notifier's way). Keyed work is retried here after
  ``RateLimited``, transport errors and ``Forbidden``; ``on_outcome`` receives the ``MessageRef``,
  the ``NotFound`` / ``MessageRejected`` / ``Unreachable`` error, or ``None`` (nothing was sent:
  the text rendered ``None``, or a newer submission with the key took its place while it was in
  flight).

Failures (seed ADR 0007 and ``ERROR_TABLE``): ``RateLimited(retry_after)`` pauses the channel for
``retry_after`` or, without one, backs off exponentially from 1 s to 60 s with jitter drawn from
the injectable ``random``; transport errors back off the same way, keyed work going back to the
tail of its class (a ``RateLimited`` one keeps its place at the head) and refused as
``MessageRejected`` once it has failed ``POISON_STRIKES`` times with other work delivered between
its tries, so one message that always fails cannot hold up its class. ``Forbidden`` marks the
channel unhealthy, logs once, fails ``send`` calls at once and holds keyed work until a re-check
every ``recheck_interval`` seconds (``provider.probe`` when ``capabilities.probe``, else the next
real send). ``Unreachable`` stops the channel for good. ``MessageRejected`` fails only that
operation: the channel stays as it was (no pause, no back-off, health unchanged), and a keyed
post of the same key waits ``budget.edit_spacing`` after the refusal, as an edit of one message
would, so a submitter whose every rendering is refused cannot spin the channel (ADR 0017). A
keyed post answered ``NotFound`` (no channel or thread to post in) is spaced the same way.

Containment (ADR 0026): nothing a piece of work raises ends the sender, only cancellation and
the process being told to stop (``containment.must_propagate``). A text that raises while it is
rendered fails that operation as ``MessageRejected`` (re-rendering it would raise again); a
provider call that raises anything else reads as a transport error (backed off, ``send`` raises
it, keyed work is retried); any other unexpected error while a piece of work is sent fails that
piece of work (``MessageRejected`` for keyed work, a ``TransportError`` for ``send``) and backs
the channel off, so a fault that repeats cannot spin it. Each is logged with the channel and the
work's key.

Errors: ``SenderClosed`` (a ``TransportError``: the sender stopped before the work was sent; work
given after ``run`` ended is answered with it at once, until the sender runs again); the whole
tree is drawn in ``bridge_core.errors``.
"""

from __future__ import annotations

import logging
import math
import random as random_module
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import asdict
from types import TracebackType
from typing import cast

import anyio
from anyio.abc import TaskGroup

from bridge_core.provider import (
    ChatProvider,
    MessageRef,
    MessageRejected,
    ProviderError,
    SendBudget,
    TransportError,
    posting_with_key,
    reading_for,
)
from bridge_core.sending.containment import fresh_error, must_propagate, provider_bug
from bridge_core.sending.failures import BACKOFF_MAX, BACKOFF_MIN, FailureReading
from bridge_core.sending.health import ChannelHealth
from bridge_core.sending.ops import (
    Edit,
    EditCall,
    Post,
    PostCall,
    Priority,
    SendOp,
    TextSource,
    render_text,
)
from bridge_core.sending.pacing import BudgetGate, SendGate
from bridge_core.sending.queue import Outcome, OutcomeCallback, Work, WorkQueue
from bridge_core.sending.statistics import SenderCounts, SenderStatistics

__all__ = [
    "BACKOFF_MAX",
    "BACKOFF_MIN",
    "ChannelSender",
    "Outcome",
    "OutcomeCallback",
    "SenderClosed",
    "SenderStatistics",
]

logger = logging.getLogger("bridge_core.sending")


class SenderClosed(TransportError):
    """The sender stopped (its ``run`` was cancelled) before this work was sent, or had stopped
    when the work was given (it is then answered at once, never queued)."""


class ChannelSender(FailureReading):
    """Sends to one channel of one provider, in priority order, within the channel's budget."""

    def __init__(
        self,
        provider: ChatProvider,
        *,
        channel: str,
        budget: SendBudget,
        random: random_module.Random | None = None,
        recheck_interval: float = 300.0,
        thread: str | None = None,
        gate: SendGate | None = None,
    ) -> None:
        if recheck_interval <= 0:
            raise ValueError(f"recheck_interval must be positive, got {recheck_interval}")
        self.provider = provider
        self.channel = channel
        self.thread = thread
        self.budget = budget
        self.recheck_interval = recheck_interval
        self._counts = SenderCounts()
        self._sent_at: deque[float] = deque(maxlen=4096)  # recent attempts, for `chatbridge top`
        self._random = random if random is not None else random_module.Random()
        self._gate: SendGate = gate if gate is not None else BudgetGate(budget)
        self._report_end: Callable[[float], Awaitable[None]] | None = getattr(
            self._gate, "ended", None
        )
        self._queue = WorkQueue(edit_spacing=budget.edit_spacing)
        self._inflight: Work | None = None
        self._wake: anyio.Event | None = None
        self._waiting = False
        self._failures = 0
        self._paused_until = -math.inf
        self.health = ChannelHealth(channel, recheck_interval=recheck_interval)
        self._running = False
        self._stopped = False  # run() ended: new work is answered SenderClosed, never queued
        self._task_group: TaskGroup | None = None
        self._on_failure = self._failure_handlers()

    # ------------------------------------------------------------------ state for health/metrics

    @property
    def healthy(self) -> bool:
        """False after ``Forbidden`` (until a re-check succeeds) or ``Unreachable`` (for good)."""
        return self.health.ok and self.health.gave_up is None

    @property
    def health_reason(self) -> str | None:
        """Why the channel is unhealthy, or ``None`` when it is healthy."""
        return None if self.healthy else self.health.reason

    @property
    def paused_until(self) -> float | None:
        """The anyio time a rate-limit pause or back-off ends, if one is running."""
        return self._paused_until if self._paused_until > anyio.current_time() else None

    @property
    def queued(self) -> int:
        """Operations waiting to be sent (bounded by keys, not by submissions)."""
        return len(self._queue)

    @property
    def idle(self) -> bool:
        """Nothing queued and nothing in flight."""
        return self._inflight is None and not self._queue

    def sends_at_once(self) -> bool:
        """Whether a post queued now would be sent at once: the sender runs, is idle, healthy and
        not paused, and its in-process gate has a send free now. A shared gate cannot be asked
        without a round trip to its store, so with one this is False (ADR 0121)."""
        gate = self._gate
        return (
            self._running
            and self.idle
            and self.healthy
            and self.paused_until is None
            and isinstance(gate, BudgetGate)
            and gate.delay(anyio.current_time()) == 0.0
        )

    def statistics(self) -> SenderStatistics:
        """What it has done and where it stands now (call it in the event loop: the recent
        attempts are counted on anyio's clock)."""
        now = anyio.current_time()
        sent_at = self._sent_at
        return SenderStatistics(
            **asdict(self._counts),
            queued=self.queued,
            paused=self.paused_until is not None,
            healthy=self.healthy,
            health_reason=self.health_reason,
            sends_last_second=sum(1 for t in sent_at if t > now - 1.0),
            sends_last_minute=sum(1 for t in sent_at if t > now - 60.0),
            sends_last_hour=sum(1 for t in sent_at if t > now - 3600.0),
        )

    # ------------------------------------------------------------------ the two ways in

    def submit(
        self,
        key: Hashable,
        *,
        text: TextSource,
        edit: MessageRef | None = None,
        priority: int = Priority.UPDATE,
        on_outcome: OutcomeCallback | None = None,
        thread: str | None = None,
        call: Callable[..., Awaitable[MessageRef]] | None = None,
    ) -> bool:
        """Queue supersedable work without waiting; True when it replaced queued work of ``key``.

        A replaced submission gets no outcome of its own: its replacement's answers for both.
        ``edit`` makes it an edit of that message, otherwise it is a post (in ``thread`` if given).
        ``call`` replaces the provider's ``post`` / ``edit`` (``Post.call``, ``Edit.call``).
        """
        op: SendOp
        if edit is None:
            op = Post(text, thread, call=cast("PostCall | None", call))
        else:
            op = Edit(edit, text, call=cast("EditCall | None", call))
        return self._enqueue(Work(key, op, self._check_priority(priority), on_outcome))

    async def send(self, op: SendOp, *, priority: int = Priority.TERMINAL) -> MessageRef:
        """Send ``op`` and wait for it; the ``MessageRef`` or the ``ProviderError`` it met.

        Raises ``Forbidden`` at once while the channel waits for its re-check, and ``Unreachable``
        once the channel has been given up.
        """
        self.health.refuse_if_unhealthy()
        work = Work(object(), op, self._check_priority(priority), keyed=False)
        work.waiter = anyio.Event()
        self._enqueue(work)
        try:
            await work.waiter.wait()
        finally:
            if not work.done:  # cancelled: taken back if queued, never resent
                work.abandoned = True
                self._queue.remove(work)
        result = work.result
        if work.begin_error is not None:
            raise work.begin_error
        if isinstance(result, ProviderError):
            raise result
        if result is None:
            raise ValueError("send(): the operation's text rendered None, so nothing was sent")
        return result

    def rebind(self, provider: ChatProvider) -> None:
        """Send through ``provider`` from the next send on (a reconnect built a new instance):
        queued work, pacing and health carry over; a send in flight ends on the old one."""
        self.provider = provider

    def cancel(self, key: Hashable) -> bool:
        """Withdraw queued work of ``key`` (its on_outcome gets ``None``); False if none queued."""
        work = self._queue.withdraw(key)
        if work is not None:
            self._resolve(work, None)
        return work is not None

    # ------------------------------------------------------------------ running

    async def __aenter__(self) -> ChannelSender:
        task_group = anyio.create_task_group()
        await task_group.__aenter__()
        self._task_group = task_group
        self._stopped = False  # work given before run()'s first step waits for it, as at first
        task_group.start_soon(self.run)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        task_group, self._task_group = self._task_group, None
        assert task_group is not None
        task_group.cancel_scope.cancel()
        return await task_group.__aexit__(exc_type, exc, tb)

    async def run(self) -> None:
        """The drain loop; run it in a task group for the channel's lifetime."""
        if self._running:
            raise RuntimeError(f"ChannelSender for {self.channel!r} is already running")
        self._running = True
        self._stopped = False
        self._wake = anyio.Event()
        try:
            while True:
                await self._step()
        finally:
            self._running = False
            self._stopped = True
            closed = self._closed()
            for work in self._queue.take_all():
                self._resolve(work, closed)

    # ------------------------------------------------------------------ internals

    def _closed(self) -> SenderClosed:
        return SenderClosed(f"the sender for channel {self.channel!r} stopped")

    @staticmethod
    def _check_priority(priority: int) -> int:
        if priority not in (Priority.TERMINAL, Priority.NEW, Priority.UPDATE):
            raise ValueError(f"priority must be a Priority (0, 1 or 2), got {priority!r}")
        return int(priority)

    def _enqueue(self, work: Work) -> bool:
        if self._stopped:  # no drain loop will ever take it: answer now (ADR 0013)
            self._resolve(work, self._closed())
            return False
        replaced = self._queue.put(work)
        if replaced is not None:
            self._counts.superseded += 1
        if self._waiting and self._wake is not None:
            self._wake.set()
        return replaced is not None

    def _resolve(self, work: Work, result: Outcome) -> None:
        work.done = True
        work.result = result
        if work.waiter is not None:
            work.waiter.set()
        if work.on_outcome is not None:
            try:
                work.on_outcome(result)
            except BaseException as error:  # a submitter's bug must not stop the channel
                if must_propagate(error):
                    raise
                logger.exception("on_outcome callback for %r on %r raised", work.key, self.channel)

    async def _wait(self, deadline: float) -> None:
        """Sleep until ``deadline`` or until new work is submitted, whichever is first."""
        assert self._wake is not None
        self._waiting = True
        try:
            with anyio.move_on_after(max(0.0, deadline - anyio.current_time())):
                await self._wake.wait()
        finally:
            self._waiting = False
            if self._wake.is_set():
                self._wake = anyio.Event()

    async def _step(self) -> None:
        now = anyio.current_time()
        health = self.health
        if health.gave_up is not None:
            for abandoned in self._queue.take_all():
                self._resolve(abandoned, fresh_error(health.gave_up))
            await self._wait(math.inf)
            return
        if now < self._paused_until:
            await anyio.sleep(self._paused_until - now)
            return
        if not health.ok:
            if now < health.recheck_at:
                await self._wait(health.recheck_at)
                return
            if self.provider.capabilities.probe and await health.probe(self.provider):
                return
        work, ready_at = self._queue.pick(now)
        if work is None:
            await self._wait(ready_at)
            return
        try:
            await self._send(work)
        except BaseException as error:
            if must_propagate(error):
                raise
            self._contain(work, error)

    def _contain(self, work: Work, error: BaseException) -> None:
        """An error nothing else read while ``work`` was sent (a bug, or a shared gate's store
        failing): that work fails, the channel backs off so a fault that repeats cannot spin it,
        and the sender goes on."""
        logger.error(
            "channel %r: sending %r failed unexpectedly; that work is dropped, the channel "
            "carries on",
            self.channel,
            work.key,
            exc_info=error,
        )
        self._counts.contained += 1
        self._inflight = None
        self._queue.remove(work)
        self._pause(self._backoff())
        if not work.done:
            reason = f"the sender failed on this work: {type(error).__name__}: {error}"
            self._resolve(work, MessageRejected(reason) if work.keyed else TransportError(reason))

    async def _send(self, work: Work) -> None:
        # Rendered before the gate is asked, so work with nothing to say spends no budget.
        text = self._render(work)
        if text is None or not await self._take_slot(work):
            return
        now = anyio.current_time()
        self._counts.sends += 1
        self._sent_at.append(now)
        self._inflight = work
        try:
            ref = await self._call(work.op, text)
        except anyio.get_cancelled_exc_class():
            self._resolve(work, self._closed())
            raise
        except BaseException as error:
            if must_propagate(error):
                self._resolve(work, self._closed())
                raise
            self._ended(work.op, None)
            failure = self._as_provider_error(work, error)
            self._on_failure[reading_for(failure).notifier](work, failure, now)
        else:
            self._ended(work.op, ref)
            self._failures = 0
            self.health.proven()
            self._counts.delivered += 1
            self._resolve(work, ref)
        finally:
            self._inflight = None
        if self._report_end is not None:  # from now the send counts as arrived (0144, 0145)
            await self._report_end(anyio.current_time())

    def _ended(self, op: SendOp, ref: MessageRef | None) -> None:
        """A call ended (answered or failed): the edit spacing counts it from now (ADR 0144)."""
        ended = anyio.current_time()
        for written in (ref, op.ref if isinstance(op, Edit) else None):
            if written is not None:
                self._queue.wrote(written.message_id, ended)

    def _render(self, work: Work) -> str | None:
        """The work's text now; None when there is nothing to send (the work is then answered)."""
        try:
            text = render_text(work.op.text)
        except BaseException as error:
            if must_propagate(error):
                raise
            self._render_failed(work, error)
            return None
        if text is None:
            self._queue.remove(work)
            self._counts.skipped += 1
            self._resolve(work, None)
        return text

    async def _take_slot(self, work: Work) -> bool:
        """Begin the post (when it has a ``begin``) and reserve its send; True when it may go now,
        and then the work has left its queue. False: it stays queued for a later step, or it
        was answered (its ``begin`` raised)."""
        op = work.op
        if op.begin is not None:
            # ``begin`` (the ledger's claim, a database commit) runs once the gate says the send
            # may go, so a post (or an edit: a streamed reply's final text) waiting for its slot
            # has not begun (ADR 0028). The send is reserved after it: a grant must be used at
            # once, or the sends it spaces would reach the platform closer than the budget allows.
            delay = await self._gate.peek(anyio.current_time(), priority=work.priority)
            if delay > 0:
                await anyio.sleep(delay)  # the work stays queued, not begun
                return False
            if not await self._begin(work, op):
                return False
        delay = await self._gate.reserve(anyio.current_time(), priority=work.priority)
        if delay > 0:
            await anyio.sleep(delay)  # the work stays queued; the next step re-renders it
            return False
        if not self._queue.is_queued(work):
            # Replaced or withdrawn while a shared gate answered (the in-process gate never
            # yields): the reserved send goes unused, which only errs on the side of the budget.
            if self._report_end is not None:
                await self._report_end(anyio.current_time())
            return False
        self._queue.remove(work)
        return True

    async def _call(self, op: SendOp, text: str) -> MessageRef:
        """The one provider call of a send."""
        if isinstance(op, Post):
            self._counts.posts += 1
            thread = op.thread or self.thread
            with posting_with_key(op.key):
                if op.call is not None:
                    return await op.call(self.channel, text, thread)
                return await self.provider.post(self.channel, text, thread=thread)
        self._counts.edits += 1
        if op.call is not None:
            return await op.call(op.ref, text)
        return await self.provider.edit(op.ref, text)

    def _as_provider_error(self, work: Work, error: BaseException) -> ProviderError:
        if isinstance(error, ProviderError):
            return error
        self._counts.contained += 1
        return provider_bug(error, provider=self.provider.name, channel=self.channel, key=work.key)

    async def _begin(self, work: Work, op: SendOp) -> bool:
        """Await the post's ``begin`` (the caller's last word before its send); False when it
        raised: the work leaves the queue unsent."""
        assert op.begin is not None
        try:
            await op.begin()
        except anyio.get_cancelled_exc_class():
            self._queue.remove(work)
            self._resolve(work, self._closed())
            raise
        except BaseException as error:
            if must_propagate(error):
                raise
            self._queue.remove(work)
            work.begin_error = (
                error if isinstance(error, Exception) else TransportError(f"begin raised {error!r}")
            )
            self._resolve(work, None)
            return False
        return True

    def _render_failed(self, work: Work, error: BaseException) -> None:
        """Rendering ``work``'s text raised: that operation fails as a refused message (the same
        state renders the same way, so retrying cannot help); the channel goes on."""
        logger.error(
            "channel %r: rendering the text of %r raised; that message is dropped, the channel "
            "carries on",
            self.channel,
            work.key,
            exc_info=error,
        )
        self._counts.contained += 1
        self._queue.remove(work)
        if work.keyed:  # a resubmission of the key is spaced like a refused post
            self._queue.refused(work.key, anyio.current_time())
        self._resolve(work, MessageRejected(f"rendering raised {type(error).__name__}: {error}"))
