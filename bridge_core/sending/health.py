"""Whether a channel can be sent to: healthy, forbidden until a re-check, or given up.

``ChannelHealth`` is the sender's record of what the platform last said about the channel
(ADR 0013): ``Forbidden`` makes it unhealthy until a re-check (a probe, or the next real send)
succeeds; ``Unreachable`` gives it up for good. Listeners added with ``on_proven`` hear each
time the channel proves it can be sent to (every successful send or probe): that is how the
delivery ledger learns that a reply it parked may have its last attempt now (ADR 0029).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

import anyio

from bridge_core.provider import ChatProvider, Forbidden, Unreachable
from bridge_core.sending.containment import must_propagate

__all__ = ["ChannelHealth"]

logger = logging.getLogger("bridge_core.sending")


class ChannelHealth:
    """One channel's health, its re-check time, and who hears that it proved healthy."""

    def __init__(self, channel: str, *, recheck_interval: float) -> None:
        self.channel = channel
        self.recheck_interval = recheck_interval
        self.ok = True  # False from Forbidden until a re-check succeeds
        self.reason: str | None = None
        self.recheck_at = -math.inf
        self.gave_up: Unreachable | None = None
        self._proven: list[Callable[[], None]] = []

    def on_proven(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` after every successful send or probe on the channel (it must be
        quick and must not block: it runs inside the sender's loop)."""
        self._proven.append(listener)

    def refuse_if_unhealthy(self) -> None:
        if self.gave_up is not None:
            raise Unreachable(f"channel {self.channel!r} was given up: {self.gave_up}")
        if not self.ok and anyio.current_time() < self.recheck_at:
            raise Forbidden(
                f"channel {self.channel!r} is unhealthy ({self.reason}); "
                f"nothing is sent until the re-check in "
                f"{self.recheck_at - anyio.current_time():.0f} s"
            )

    def forbidden(self, error: Forbidden) -> None:
        if self.ok:
            logger.warning(
                "channel %r is forbidden (%s): nothing is sent there until a re-check every %.0f s",
                self.channel,
                error,
                self.recheck_interval,
            )
        self.ok = False
        self.reason = f"forbidden: {error}"
        self.recheck_at = anyio.current_time() + self.recheck_interval

    def unreachable(self, error: Unreachable) -> None:
        logger.error("channel %r is unreachable (%s): giving it up", self.channel, error)
        self.gave_up = error
        self.reason = f"unreachable: {error}"

    def proven(self) -> None:
        """A send or a probe succeeded: healthy again, and the listeners are told."""
        if not self.ok:
            logger.warning("channel %r is reachable again", self.channel)
        self.ok = True
        self.reason = None
        for listener in self._proven:
            try:
                listener()
            except BaseException as error:  # a listener's bug must not stop the channel
                if must_propagate(error):
                    raise
                logger.exception("channel %r: a health listener raised", self.channel)

    async def probe(self, provider: ChatProvider) -> bool:
        """Run the provider's probe; True when it settled the re-check (either way)."""
        try:
            answer = await provider.probe(self.channel)
        except BaseException as error:  # any failure of the probe: still unhealthy, check later
            if must_propagate(error):
                raise
            answer = False
            self.reason = f"forbidden; the re-check failed: {error!r}"
        if answer is None:
            return False  # the provider cannot tell: the next real send is the re-check
        if answer:
            self.proven()
        else:
            self.recheck_at = anyio.current_time() + self.recheck_interval
        return True
