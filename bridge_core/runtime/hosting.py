"""Hosting a channel's notifier on this gateway while placement puts it here (scale-out).

With gateways sharing a Redis, ``NotifierPlacement`` names one gateway per channel to run its
notifier, which follows the fleet bus for its events. ``host_notifier`` runs that notifier while
the placement holds, and ends it when the placement moves (the successor starts from the bus
cursor) or at stop, when the notifier takes no new events but sends what it took before this
gateway leaves the group, so its successor starts after it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import anyio

from bridge_core.notify import Notifier
from bridge_core.runtime.builders import notifier_for
from bridge_core.runtime.channel import ChannelRuntime
from bridge_core.runtime.placement import FleetBus, NotifierPlacement, wait_until

__all__ = ["host_notifier"]

log = logging.getLogger("bridge_core.runtime")


async def host_notifier(
    channel: ChannelRuntime,
    *,
    placement: NotifierPlacement,
    bus: FleetBus,
    stopping: Callable[[], bool],
) -> None:
    """Run ``channel``'s notifier whenever ``placement`` puts it on this gateway, until
    ``stopping()``."""
    while not stopping():
        await wait_until(lambda: stopping() or placement.hosts(channel.name))
        if stopping():
            return
        notifier = notifier_for(channel)
        log.info("channel %s: its notifier runs on this gateway now", channel.name)
        try:
            async with anyio.create_task_group() as tg:
                channel.notifier = notifier
                tg.start_soon(notifier.run)
                following = anyio.CancelScope()  # entered by _follow
                tg.start_soon(_follow, bus, channel, notifier, following)
                await wait_until(lambda: stopping() or not placement.hosts(channel.name))
                following.cancel()
                if stopping():
                    await wait_until(_idle_check(notifier), poll=0.05)
                tg.cancel_scope.cancel()
        finally:
            channel.notifier = None
        if not stopping():
            log.info("channel %s: its notifier moved to another gateway", channel.name)


def _idle_check(notifier: Notifier) -> Callable[[], bool]:
    return lambda: notifier.idle


async def _follow(
    bus: FleetBus, channel: ChannelRuntime, notifier: Notifier, scope: anyio.CancelScope
) -> None:
    with scope:
        await bus.follow(channel.name, notifier.handle_all)
