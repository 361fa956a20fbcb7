"""``GET /channels/{channel.id}/messages`` for ``FakeDiscord`` (route ``list_messages``), kept
apart so the fake's main module stays readable.

As Discord documents it: ``before``, ``after`` and ``around`` are mutually exclusive, ``limit``
is 1 to 100 (50 when absent), the bot needs to see the channel (404 Unknown Channel 10003, 403
Missing Access 50001), and without Read Message History the answer is an empty list, not an
error. The list is newest first whatever the query, as Discord answers (discord.py's history
reads an ``after`` page's newest message from its first element). ``around`` is not served.
Setting ``fake.history_hold`` to a ``threading.Event`` holds every answer until it is set.
Setting ``fake.history_limit`` paces reads per channel (``history_limit`` per
``history_window`` seconds) as Discord paces a route: every answer carries ``X-RateLimit-*``
headers, and a read past the limit is a 429 (counted in ``fake.rate_limited_history``).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from dataclasses import replace
from typing import TYPE_CHECKING

from bridge_core.testing import RecordedRequest, Reply

if TYPE_CHECKING:
    from bridge_discord.testing.fake_discord import FakeDiscord

__all__ = ["list_messages"]


def _invalid(field: str) -> Reply:
    return Reply.json(
        {
            "message": "Invalid Form Body",
            "code": 50035,
            "errors": {field: {"_errors": [{"code": "INVALID", "message": "Invalid value."}]}},
        },
        status=400,
    )


async def list_messages(fake: FakeDiscord, request: RecordedRequest) -> Reply:
    hold = fake.history_hold
    if hold is not None:  # a test holds the answer until it has done what it must first
        await asyncio.get_running_loop().run_in_executor(None, hold.wait, 30.0)
    limited, headers = _pace(fake, request)
    if limited is not None:
        return limited
    answer = _answer(fake, request)
    return replace(answer, headers={**answer.headers, **headers})


def _pace(fake: FakeDiscord, request: RecordedRequest) -> tuple[Reply | None, dict[str, str]]:
    limit, window = fake.history_limit, fake.history_window
    if limit is None:
        return None, {}
    now = time.monotonic()
    with fake.lock:
        recent = fake._history_reads.setdefault(request.params.get("channel_id", ""), deque())
        while recent and now - recent[0] >= window:
            recent.popleft()
        if len(recent) >= limit:
            retry = round(window - (now - recent[0]), 3)
            fake.rate_limited_history += 1
            reply = fake.rate_limited(retry)
            headers = {**reply.headers, **_headers(limit, 0, retry)}
            return Reply.json(json.loads(reply.body), status=429, headers=headers), {}
        recent.append(now)
        return None, _headers(limit, limit - len(recent), window - (now - recent[0]))


def _headers(limit: int, remaining: int, reset_after: float) -> dict[str, str]:
    reset_after = max(reset_after, 0.001)
    return {
        "X-RateLimit-Limit": str(limit),
        "X-RateLimit-Remaining": str(remaining),
        "X-RateLimit-Reset-After": f"{reset_after:.3f}",
        "X-RateLimit-Reset": f"{time.time() + reset_after:.3f}",
        "X-RateLimit-Bucket": "fake-list-messages",
    }


def _answer(fake: FakeDiscord, request: RecordedRequest) -> Reply:
    denied = fake._unauthorized(request)
    if denied:
        return denied
    query = request.query
    anchors = [name for name in ("before", "after", "around") if name in query]
    if len(anchors) > 1 or "around" in anchors:
        return _invalid(anchors[-1])
    try:
        limit = int(query.get("limit", "50"))
        anchor = int(query[anchors[0]]) if anchors else None
    except ValueError:
        return _invalid("limit" if "limit" in query else anchors[0])
    if not 1 <= limit <= 100:
        return _invalid("limit")
    with fake.lock:
        channel = fake._channel(request, sending=False)
        if isinstance(channel, Reply):
            return channel
        if not channel.read_history:
            return Reply.json([])
        ids = sorted(channel.message_ids)
        if anchors == ["after"]:
            chosen = [mid for mid in ids if mid > anchor][:limit]  # type: ignore[operator]
        elif anchors == ["before"]:
            chosen = [mid for mid in ids if mid < anchor][-limit:]  # type: ignore[operator]
        else:
            chosen = ids[-limit:]
        return Reply.json([fake.messages[mid] for mid in reversed(chosen)])
