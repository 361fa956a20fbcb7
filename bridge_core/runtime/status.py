"""``GET /v1/status``: what a running gateway is doing, for ``chatbridge top`` and people.

Per channel: its health, its budget and how much of it the last second, minute and hour used,
the live messages its notifier holds, and the members of its agent group; the ledger's rows by
state. Everything comes from in-process state and one count of the ledger, so polling it every
second or two costs the gateway little.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bridge_core.runtime.api_backend import GatewayApi

__all__ = ["LIVE_LISTED", "gateway_status"]

LIVE_LISTED = 50  # live messages listed per channel (the newest)


async def gateway_status(gateway: GatewayApi) -> dict[str, Any]:
    """The status document, read from each part's ``statistics()`` snapshot."""
    health = await gateway.health()
    channels: dict[str, Any] = {}
    for name, channel in gateway.channels.items():
        sender = channel.sender.statistics()
        live = channel.notifier.live_view() if channel.notifier is not None else []
        members: int | None = None
        if channel.log is not None:
            try:
                members = (await channel.log.statistics()).members
            except Exception:  # a store hiccup shows as unknown, not as an error page
                members = None
        channels[name] = {
            **health.channels.get(name, {}),
            "provider": channel.platform,
            "channel_id": channel.channel_id,
            "budget": channel.sender.budget.to_json(),
            "sends": {
                "second": sender.sends_last_second,
                "minute": sender.sends_last_minute,
                "hour": sender.sends_last_hour,
            },
            "posts": sender.posts,
            "edits": sender.edits,
            "rate_limit_pauses": sender.rate_limit_pauses,
            "live": live[:LIVE_LISTED],
            "live_count": len(live),
            "members": members,
            "agent_here": channel.member is not None,
            "answered": channel.answered,
        }
    return {
        "gateway": gateway.gateway_id,
        "url": gateway.url,
        "time": time.time(),
        "channels": channels,
        "providers": health.providers,
        "ledger": (await gateway.ledger_statistics()).by_state(),
    }
