"""``conversations.history`` for ``FakeSlack`` (route ``conversations.history``), kept apart so
the fake's main module stays readable.

As Slack documents it: the channel's messages, newest first, between ``oldest`` and ``latest``
(now when absent), both exclusive unless ``inclusive``; ``limit`` 100 when absent and at most
999 (``fake.history_page_max`` lowers it, as Slack's 15 for commercially distributed apps
outside the Marketplace); ``has_more`` and an opaque ``response_metadata.next_cursor`` for the
next, older page. Replies in threads are left out unless broadcast (``reply_broadcast``); a
thread's parent is listed. The bot must be a member (``not_in_channel``; ``channel_not_found``
for a channel it cannot see); ``fake.history_refusals[channel] = code`` answers any other
refusal for one channel. ``fake.history_limit = (requests, seconds)`` paces reads as Slack's
tiers do, across channels: past it the answer is HTTP 429 with ``Retry-After`` in whole seconds,
counted in ``fake.history_rate_limited``; ``fake.history_times`` holds when (monotonic) each
request came and whether it was refused so. Setting ``fake.history_hold`` to a
``threading.Event`` holds every answer until it is set.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import math
import re
import time
from typing import TYPE_CHECKING, Any

from bridge_core.testing import RecordedRequest, Reply

if TYPE_CHECKING:
    from bridge_slack.testing.fake_slack import FakeSlack, FakeSlackMessage

__all__ = ["HISTORY_PAGE_MAX", "conversations_history", "history_json"]

HISTORY_PAGE_MAX = 999


def _key(ts: str) -> tuple[int, int]:
    seconds, _, fraction = ts.partition(".")
    return int(seconds), int(fraction.ljust(9, "0") or 0)


def _bound(value: Any, name: str) -> tuple[int, int] | Reply | None:
    if value is None or value == "":
        return None
    # read as digits, not as a float: a float cannot tell 1700000000.000100 from its neighbours
    if not re.fullmatch(r"[0-9]{1,15}(\.[0-9]{1,9})?", str(value)):
        return Reply.json({"ok": False, "error": f"invalid_ts_{name}"})
    return _key(str(value))


def history_json(fake: FakeSlack, message: FakeSlackMessage) -> dict[str, Any]:
    """A stored message as ``conversations.history`` lists it."""
    data: dict[str, Any] = {
        "type": "message",
        "user": message.user,
        "text": message.text,
        "ts": message.ts,
        "team": fake.team_id,
    }
    if message.user == fake.bot_user_id:
        data["bot_id"] = fake.bot_id
    if message.thread_ts is not None:
        data["thread_ts"] = message.thread_ts
    data.update(message.fields)
    return data


def _listed(message: FakeSlackMessage) -> bool:
    reply = message.thread_ts is not None and message.thread_ts != message.ts
    return not reply or message.fields.get("subtype") == "thread_broadcast"


def _pace(fake: FakeSlack) -> Reply | None:
    now = time.monotonic()
    if fake.history_limit is None:
        fake.history_times.append((now, False))
        return None
    requests, seconds = fake.history_limit
    answered = [t for t in fake._history_answered if now - t < seconds]
    fake._history_answered = answered
    fake.history_times.append((now, len(answered) >= requests))
    if len(answered) >= requests:
        fake.history_rate_limited += 1
        return fake.rate_limited(max(1, math.ceil(seconds - (now - answered[0]))))
    answered.append(now)
    return None


async def conversations_history(fake: FakeSlack, request: RecordedRequest) -> Reply:
    hold = fake.history_hold
    if hold is not None:  # a test holds the answer until it has done what it must first
        await asyncio.get_running_loop().run_in_executor(None, hold.wait, 30.0)
    return _answer(fake, request)


def _answer(fake: FakeSlack, request: RecordedRequest) -> Reply:
    with fake.lock:
        params = fake._prepare(request)
        if isinstance(params, Reply):
            return params
        limited = _pace(fake)
        if limited is not None:
            return limited
        channel_id = str(params.get("channel", ""))
        refusal = fake.history_refusals.get(channel_id)
        if refusal is not None:
            return fake.error(refusal)
        channel = fake.channels.get(channel_id)
        if channel is None:
            return fake.error("channel_not_found")
        if not channel.member:
            return fake.error("not_in_channel")
        oldest = _bound(params.get("oldest"), "oldest")
        latest = _bound(params.get("latest"), "latest")
        if isinstance(oldest, Reply):
            return oldest
        if isinstance(latest, Reply):
            return latest
        inclusive = str(params.get("inclusive", "")).lower() in ("1", "true")
        try:
            limit = int(params.get("limit") or 100)
        except ValueError:
            return fake.error("invalid_limit")
        limit = max(1, min(limit, fake.history_page_max))
        before: tuple[int, int] | None = None
        cursor = params.get("cursor")
        if cursor:
            try:
                before = _key(base64.b64decode(str(cursor), validate=True).decode()[3:])
            except (ValueError, binascii.Error, UnicodeDecodeError):
                return fake.error("invalid_cursor")
        found = []
        for message in fake.messages.values():
            key = _key(message.ts)
            if message.channel != channel_id or not _listed(message):
                continue
            if oldest is not None and (key < oldest or (key == oldest and not inclusive)):
                continue
            if latest is not None and (key > latest or (key == latest and not inclusive)):
                continue
            if before is not None and key >= before:
                continue
            found.append((key, message))
        found.sort(key=lambda pair: pair[0], reverse=True)
        page = [message for _, message in found[:limit]]
        has_more = len(found) > limit
        following = base64.b64encode(f"ts:{page[-1].ts}".encode()).decode() if has_more else ""
        return fake._ok(
            {
                "messages": [history_json(fake, m) for m in page],
                "has_more": has_more,
                "pin_count": 0,
                "response_metadata": {"next_cursor": following},
            }
        )
