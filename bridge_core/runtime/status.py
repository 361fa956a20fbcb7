"""``GET /v1/status``: what a running gateway is doing, for ``chatbridge top`` and people.

Per channel: its health, its budget and how much of it the last second, minute and hour used,
the live messages its notifier holds, and the members of its agent group; the ledger's rows by
state. Everything comes from in-process state and one count of the ledger, so polling it every
second or two costs the gateway little.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import anyio

if TYPE_CHECKING:
    from bridge_core.runtime.api_backend import GatewayApi

__all__ = ["LIVE_LISTED", "gateway_status"]

LIVE_LISTED = 50  # live messages listed per channel (the newest)
_WINDOWS = (("second", 1.0), ("minute", 60.0), ("hour", 3600.0))


async def gateway_status(gateway: GatewayApi) -> dict[str, Any]:
    now = anyio.current_time()
    health = await gateway.health()
    channels: dict[str, Any] = {}
    for name, channel in gateway.channels.items():
        sender = channel.sender
        used = {label: sum(1 for t in sender.sent_at if t > now - span) for label, span in _WINDOWS}
        live_view = getattr(channel.notifier, "live_view", None)
        live = live_view() if callable(live_view) else []
        members: int | None = None
        if channel.log is not None:
            try:
                members = (await channel.log.stats()).members
            except Exception:  # a store hiccup shows as unknown, not as an error page
                members = None
        channels[name] = {
            **health.channels.get(name, {}),
            "provider": channel.platform,
            "channel_id": channel.channel_id,
            "budget": sender.budget.to_json(),
            "sends": used,
            "posts": sender.stats.posts,
            "edits": sender.stats.edits,
            "rate_limit_pauses": sender.stats.rate_limit_pauses,
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
        "ledger": await gateway.ledger_counts(),
    }
