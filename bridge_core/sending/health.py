"""Whether a channel can be sent to: healthy, forbidden until a re-check, or given up.

``ChannelHealth`` is the sender's record of what the platform last said about the channel
(ADR 0013): ``Forbidden`` makes it unhealthy until a re-check (a probe, or the next real send)
succeeds; ``Unreachable`` gives it up for good.
"""

from __future__ import annotations

import logging
import math

import anyio

from bridge_core.provider import ChatProvider, Forbidden, Unreachable
from bridge_core.sending.containment import must_propagate

__all__ = ["ChannelHealth"]

logger = logging.getLogger("bridge_core.sending")


class ChannelHealth:
    """One channel's health and its re-check time."""

    def __init__(self, channel: str, *, recheck_interval: float) -> None:
        self.channel = channel
        self.recheck_interval = recheck_interval
        self.ok = True  # False from Forbidden until a re-check succeeds
        self.reason: str | None = None
        self.recheck_at = -math.inf
        self.gave_up: Unreachable | None = None

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
        """A send or a probe succeeded: healthy again."""
        if not self.ok:
            logger.warning("channel %r is reachable again", self.channel)
        self.ok = True
        self.reason = None

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
