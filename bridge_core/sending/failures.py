"""How a channel's sender reads a failed send: one handler per action of ``ERROR_TABLE``.

``ChannelSender`` inherits these from ``FailureReading``; they live apart only to keep the
sender's module under the size limit. The behaviour is ADR 0013's (pause, back-off, health,
what goes back to the submitter) with ADR 0017's refusals.
"""

from __future__ import annotations

import logging
import random as random_module
from collections.abc import Callable
from typing import cast

import anyio

from bridge_core.provider import (
    Forbidden,
    MessageRejected,
    NotifierAction,
    ProviderError,
    RateLimited,
    Unreachable,
)
from bridge_core.sending.containment import fresh_error
from bridge_core.sending.health import ChannelHealth
from bridge_core.sending.ops import Post
from bridge_core.sending.queue import Outcome, Work, WorkQueue
from bridge_core.sending.statistics import SenderCounts

__all__ = ["BACKOFF_MAX", "BACKOFF_MIN", "POISON_STRIKES", "FailureReading"]

logger = logging.getLogger("bridge_core.sending")

BACKOFF_MIN = 1.0
BACKOFF_MAX = 60.0
# Transport failures of one keyed work, each with other work delivered since its previous one,
# after which it is refused: the channel demonstrably works, this one message does not.
POISON_STRIKES = 3

FailureHandler = Callable[[Work, ProviderError, float], None]


class FailureReading:
    """The sender's reading of provider errors; the state it touches is the sender's own."""

    channel: str
    _queue: WorkQueue
    _counts: SenderCounts
    _random: random_module.Random
    _failures: int
    _paused_until: float
    health: ChannelHealth

    def _resolve(self, work: Work, result: Outcome) -> None:
        raise NotImplementedError

    def _failure_handlers(
        self,
    ) -> dict[NotifierAction, Callable[[Work, ProviderError, float], None]]:
        # One handler per action of ERROR_TABLE: the table is the one reading of errors.
        return {
            NotifierAction.PAUSE_CHANNEL: self._rate_limited,
            NotifierAction.DROP_REF_REPOST: self._not_found,
            NotifierAction.MARK_UNHEALTHY: self._forbidden,
            NotifierAction.GIVE_UP_CHANNEL: self._unreachable,
            NotifierAction.DROP_RENDERING: self._rejected,
            NotifierAction.BACK_OFF: self._transient,
        }

    def _requeue(self, work: Work, *, head: bool = True) -> None:
        """Put keyed work back in its class (at its head, or its tail), unless newer work of its
        key waits."""
        if not self._queue.put_back(work, head=head):
            self._counts.superseded += 1
            self._resolve(work, None)

    def _backoff(self) -> float:
        self._failures += 1
        base = min(BACKOFF_MAX, BACKOFF_MIN * 2.0**self._failures)
        delay = base / 2 + self._random.random() * base / 2
        return min(BACKOFF_MAX, max(BACKOFF_MIN, delay))

    def _pause(self, seconds: float) -> None:
        self._paused_until = max(self._paused_until, anyio.current_time() + seconds)

    def _fail_unkeyed(self, error: ProviderError) -> None:
        for work in self._queue.take_unkeyed():
            self._resolve(work, fresh_error(error))

    def _rate_limited(self, work: Work, error: ProviderError, now: float) -> None:
        self._counts.rate_limit_pauses += 1
        retry_after = cast(RateLimited, error).retry_after  # usable, or None (ADR 0027)
        if retry_after is None:
            self._counts.backoffs += 1
        self._pause(retry_after if retry_after is not None else self._backoff())
        self._retry_or_fail(work, error, retry_unkeyed=True)

    def _not_found(self, work: Work, error: ProviderError, now: float) -> None:
        self._counts.not_found += 1
        if work.keyed and isinstance(work.op, Post):
            # A post has no message to lose: the channel or thread is not there, and a submitter
            # that posts again at once would spin the channel as an always-refused post would.
            self._queue.refused(work.key, now)
        self._resolve(work, error)

    def _forbidden(self, work: Work, error: ProviderError, now: float) -> None:
        self._counts.forbidden += 1
        self.health.forbidden(cast(Forbidden, error))
        self._fail_unkeyed(error)
        self._retry_or_fail(work, error, retry_unkeyed=False)

    def _unreachable(self, work: Work, error: ProviderError, now: float) -> None:
        self._counts.unreachable += 1
        self.health.unreachable(cast(Unreachable, error))
        self._resolve(work, error)

    def _rejected(self, work: Work, error: ProviderError, now: float) -> None:
        # About this message only: the channel's pause, back-off and health stay as they are.
        self._counts.rejected += 1
        if work.keyed:
            self._queue.refused(work.key, now)
        self._resolve(work, error)

    def _transient(self, work: Work, error: ProviderError, now: float) -> None:
        self._counts.transport_errors += 1
        self._counts.backoffs += 1
        self._pause(self._backoff())
        if not work.keyed:
            return self._resolve(work, error)
        # Other work delivered since this work's previous failure means the channel works and
        # this work does not: after POISON_STRIKES such failures it is refused (ADR 0026), so
        # one message cannot be retried for ever. An outage fails everything, strikes nothing.
        delivered = self._counts.delivered
        if work.delivered_mark is not None and delivered > work.delivered_mark:
            work.strikes += 1
        work.delivered_mark = delivered
        if work.strikes >= POISON_STRIKES:
            return self._poisoned(work, error, now)
        # At the tail: work failing for a cause of its own must not hold up its class, replies
        # and other agents' final states included, while it is retried.
        self._requeue(work, head=False)

    def _poisoned(self, work: Work, error: ProviderError, now: float) -> None:
        logger.warning(
            "channel %r: %r failed again after other work was delivered, %d times (%s); it is "
            "dropped, the channel carries on",
            self.channel,
            work.key,
            work.strikes,
            error,
        )
        self._counts.rejected += 1
        self._queue.refused(work.key, now)
        reason = f"failed {work.strikes} times while the channel delivered other work: {error}"
        self._resolve(work, MessageRejected(reason))

    def _retry_or_fail(self, work: Work, error: ProviderError, *, retry_unkeyed: bool) -> None:
        if work.keyed or (retry_unkeyed and not work.abandoned):  # abandoned: its caller left
            return self._requeue(work)
        self._resolve(work, error)
