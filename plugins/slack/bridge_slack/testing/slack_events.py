"""Slack Events API requests as Slack sends them, for testing a provider's inbound side.

``signed_headers`` signs a body with a signing secret exactly as Slack does
(``v0:{timestamp}:{body}``, HMAC-SHA256); ``event_callback`` and ``message_event`` build the
bodies. The same payloads travel over Socket Mode (``FakeSlack.push_event``).
"""

from __future__ import annotations

import hashlib
import hmac
import json as jsonlib
import time
from collections.abc import Mapping
from typing import Any

__all__ = ["event_callback", "message_event", "signed_headers"]


def signed_headers(
    signing_secret: str,
    body: bytes,
    *,
    timestamp: float | None = None,
    retry_num: int | None = None,
    retry_reason: str = "http_timeout",
) -> dict[str, str]:
    """The headers Slack sends with an Events API request: ``X-Slack-Request-Timestamp`` and
    ``X-Slack-Signature`` (``v0=`` HMAC-SHA256 of ``v0:{timestamp}:{body}``), and on a retry
    ``X-Slack-Retry-Num`` and ``X-Slack-Retry-Reason``."""
    stamp = str(int(time.time() if timestamp is None else timestamp))
    base = b"v0:" + stamp.encode() + b":" + body
    digest = hmac.new(signing_secret.encode(), base, hashlib.sha256).hexdigest()
    headers = {
        "Content-Type": "application/json",
        "X-Slack-Request-Timestamp": stamp,
        "X-Slack-Signature": f"v0={digest}",
    }
    if retry_num is not None:
        headers["X-Slack-Retry-Num"] = str(retry_num)
        headers["X-Slack-Retry-Reason"] = retry_reason
    return headers


def message_event(
    *,
    channel: str,
    text: str,
    user: str = "U0PERSON",
    ts: str = "1700000000.000100",
    thread_ts: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A ``message`` event as Slack puts it in ``event_callback.event``."""
    event: dict[str, Any] = {
        "type": "message",
        "channel": channel,
        "user": user,
        "text": text,
        "ts": ts,
        "event_ts": ts,
        "channel_type": "channel",
    }
    if thread_ts is not None:
        event["thread_ts"] = thread_ts
    event.update(extra)
    return event


def event_callback(
    event: Mapping[str, Any],
    *,
    event_id: str = "Ev0000000001",
    team_id: str = "T0FAKE",
    api_app_id: str = "A0BRIDGE",
    event_time: int | None = None,
) -> bytes:
    """The JSON body of an Events API ``event_callback`` request."""
    payload = {
        "token": "deprecated-verification-token",
        "team_id": team_id,
        "api_app_id": api_app_id,
        "event": dict(event),
        "type": "event_callback",
        "event_id": event_id,
        "event_time": int(time.time()) if event_time is None else event_time,
    }
    return jsonlib.dumps(payload).encode("utf-8")
