"""Inbound: the Slack Events API endpoint, served on the gateway's HTTP server.

Every request must carry a valid ``X-Slack-Signature`` over ``v0:{timestamp}:{body}`` with a
timestamp within five minutes (``slack_sdk.signature.SignatureVerifier``); anything else is
answered 401 and never reaches the core. A ``url_verification`` request is answered with its
challenge. A message event becomes an ``InboundMessage`` whose ``message_id`` is
``{channel}:{ts}``, the same for Slack's retries (``X-Slack-Retry-Num``) and for the
``app_mention`` twin of a message, so the core's dedup drops repeats; a retry is acknowledged
like the first delivery.

Messages written by bots never become turns and are not handed to the core: anything with a
``bot_id``, the ``bot_message`` subtype, or the bridge's own user id. Edits, deletions, joins and
other subtypes are acknowledged and ignored.

A message goes to the core through the provider's ``take`` (``bridge_slack.receiver``): straight
to the sink, or, while its channel's missed messages are being read back, held and answered 200
at once, to follow them. When the core's sink fails, the answer is 500 so Slack retries (at least
once delivery; the dedup absorbs the repeat); a body that is not an event is answered 400 with
``X-Slack-No-Retry: 1``, and so are headers Slack never sends (a timestamp or retry count that is
not a whole number, a signature that is not ASCII) and a body that is not UTF-8: each with a short
reason, never a traceback. A signed event whose text holds a lone surrogate or a NUL is taken with
U+FFFD in their place and logged (ADR 0070): refused, it would be a poison message Slack retries
forever.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from slack_sdk.signature import Clock, SignatureVerifier

from bridge_core import (
    HttpRequest,
    HttpResponse,
    HttpRoute,
    InboundMessage,
    InboundSink,
    find_invalid_text,
    valid_json,
)

if TYPE_CHECKING:
    from bridge_slack.provider import SlackProvider
    from bridge_slack.settings import SlackSettings

__all__ = [
    "IGNORED_SUBTYPES",
    "USER_SUBTYPES",
    "SlackEvents",
    "from_history",
    "made_valid",
    "to_inbound",
]

logger = logging.getLogger("bridge_slack.events")

# Message subtypes a person writes; every other subtype is a change notice or a system line.
USER_SUBTYPES = frozenset({None, "thread_broadcast", "file_share", "me_message"})
IGNORED_SUBTYPES = frozenset({"bot_message", "message_changed", "message_deleted"})

_HANDLED_EVENTS = frozenset({"message", "app_mention"})

# Whole seconds since the epoch, as Slack sends them: int() alone would take Arabic-Indic or
# fullwidth digits, " 17" or "1_7", and raise on "1531420618.0" or 5,000 digits.
_WHOLE_NUMBER = re.compile(r"[0-9]{1,15}")


class _CallableClock(Clock):
    def __init__(self, now: Callable[[], float]) -> None:
        self._now = now

    def now(self) -> float:
        return self._now()


def _json(status: int, data: dict[str, Any], headers: dict[str, str] | None = None) -> HttpResponse:
    return HttpResponse(status=status, body=json.dumps(data).encode(), headers=headers or {})


class SlackEvents:
    """The Events API handler of one Slack provider; ``route()`` is what the gateway serves.

    ``settings`` and ``profile`` are the provider's (its signing secret, its events path, the
    profile its messages come in for); the provider itself is asked only for its own ids.
    ``clock`` (epoch seconds) is what signature timestamps are checked against; tests pass a
    fixed one.
    """

    def __init__(
        self,
        provider: SlackProvider,
        sink: InboundSink,
        *,
        settings: SlackSettings,
        profile: str,
        clock: Callable[[], float] = time.time,
    ) -> None:
        secret = settings.signing_secret
        if secret is None:
            raise ValueError(
                f"Slack profile {profile!r} has no signing_secret: inbound events "
                "cannot be verified, so they are not served"
            )
        self._provider = provider
        self._sink = sink
        self._profile = profile
        self._events_path = settings.events_path
        self._verifier = SignatureVerifier(secret.get_secret_value(), clock=_CallableClock(clock))

    def __repr__(self) -> str:
        return f"SlackEvents(profile={self._profile!r})"

    def route(self) -> HttpRoute:
        return HttpRoute("POST", self._events_path, self.handle)

    async def handle(self, request: HttpRequest) -> HttpResponse:
        malformed = _malformed(request)
        if malformed is not None:
            logger.warning("Slack profile %s: refused a request: %s", self._profile, malformed)
            return _json(400, {"error": malformed}, {"X-Slack-No-Retry": "1"})
        if not self._verifier.is_valid_request(request.body, request.headers):
            logger.warning(
                "Slack profile %s: refused an event with a missing, wrong or expired signature "
                "(timestamp %s)",
                self._profile,
                request.header("X-Slack-Request-Timestamp"),
            )
            return _json(401, {"error": "invalid signature"})
        try:
            payload = json.loads(request.body)
        except (UnicodeDecodeError, ValueError, RecursionError):
            return _json(400, {"error": "body is not JSON"}, {"X-Slack-No-Retry": "1"})
        if not isinstance(payload, dict):
            return _json(400, {"error": "body is not an object"}, {"X-Slack-No-Retry": "1"})
        payload = made_valid(payload, profile=self._profile)
        retry_num = request.header("X-Slack-Retry-Num")
        if retry_num is not None and not _WHOLE_NUMBER.fullmatch(retry_num):
            return _json(
                400, {"error": "X-Slack-Retry-Num is not a whole number"}, {"X-Slack-No-Retry": "1"}
            )
        kind = payload.get("type")
        if kind == "url_verification":
            return _json(200, {"challenge": str(payload.get("challenge", ""))})
        if kind != "event_callback":
            return _json(200, {"ok": True, "ignored": str(kind)})
        await self._provider.learn_identity()
        message = self.to_inbound(payload, retry_num)
        if message is None:
            return _json(200, {"ok": True, "ignored": "not a user message"})
        try:
            await self._provider.take(message, self._sink)
        except Exception:
            # Whatever the core's failure, Slack must retry: the dedup absorbs the repeat.
            logger.exception(
                "Slack profile %s: the core failed to take message %s; Slack will retry",
                self._profile,
                message.message_id,
            )
            return _json(500, {"error": "not stored; retry"})
        return _json(200, {"ok": True})

    def to_inbound(self, payload: dict[str, Any], retry_num: str | None) -> InboundMessage | None:
        """The user message in an ``event_callback`` payload, or ``None`` for anything else."""
        retries = int(retry_num) if retry_num and _WHOLE_NUMBER.fullmatch(retry_num) else 0
        return to_inbound(
            payload,
            profile=self._profile,
            own_ids=self._provider.own_ids(),
            retry_num=retries,
        )


def _malformed(request: HttpRequest) -> str | None:
    """Why a request cannot be from Slack before its signature is even checked (the SDK's check
    would raise on it), or ``None``."""
    timestamp = request.header("X-Slack-Request-Timestamp")
    if timestamp is not None and not _WHOLE_NUMBER.fullmatch(timestamp):
        return "X-Slack-Request-Timestamp is not whole seconds since the epoch"
    signature = request.header("X-Slack-Signature")
    if signature is not None and not signature.isascii():
        return "X-Slack-Signature is not ASCII"
    try:
        request.body.decode("utf-8")
    except UnicodeDecodeError:
        return "body is not UTF-8"
    return None


def made_valid(payload: dict[str, Any], *, profile: str) -> dict[str, Any]:
    """``payload`` with every lone surrogate and NUL replaced by U+FFFD, logged when there was
    one: Slack signed it, so it is taken, not refused (ADR 0070)."""
    invalid = find_invalid_text(payload)
    if invalid is None:
        return payload
    logger.warning(
        "Slack profile %s: event %s: %s %s; taken with U+FFFD in its place",
        profile,
        valid_json(payload.get("event_id")),
        invalid.field,
        invalid.reason,
    )
    made: dict[str, Any] = valid_json(payload)
    return made


def to_inbound(
    payload: dict[str, Any],
    *,
    profile: str,
    own_ids: tuple[str | None, str | None],
    retry_num: int = 0,
) -> InboundMessage | None:
    """The user message in an Events API ``event_callback`` payload (over HTTP or Socket Mode),
    or ``None`` for bots, the bridge itself, system subtypes and other events."""
    event = payload.get("event")
    if not isinstance(event, dict):
        return None
    kind, subtype = event.get("type"), event.get("subtype")
    # a list or an object there is unhashable: the set lookups below would raise
    if not isinstance(kind, str) or kind not in _HANDLED_EVENTS:
        return None
    if subtype is not None and not isinstance(subtype, str):
        return None
    if subtype in IGNORED_SUBTYPES or subtype not in USER_SUBTYPES:
        return None
    user = event.get("user")
    if event.get("bot_id") or event.get("bot_profile") or not isinstance(user, str):
        return None
    if user in own_ids:
        return None
    channel, ts = event.get("channel"), event.get("ts")
    if not isinstance(channel, str) or not isinstance(ts, str):
        return None
    try:
        at = float(ts)
    except ValueError:
        return None
    thread = event.get("thread_ts")
    return InboundMessage(
        message_id=f"{channel}:{ts}",
        channel=channel,
        author=user,
        text=str(event.get("text") or ""),
        at=at,
        thread=thread if isinstance(thread, str) and thread != ts else None,
        author_is_bot=False,
        platform="slack",
        profile=profile,
        extra={
            "event_id": payload.get("event_id"),
            "team": payload.get("team_id"),
            "event_type": event.get("type"),
            "retry_num": retry_num,
        },
    )


def from_history(
    message: Any, *, channel: str, profile: str, own_ids: tuple[str | None, str | None]
) -> InboundMessage | None:
    """A message of ``channel`` as ``conversations.history`` lists it, read as the live
    ``message`` event for it would be (``to_inbound``: the same filter, the same fields), or
    ``None``. A listed message names neither its channel nor the workspace; its own ``team`` is
    taken for the latter."""
    if not isinstance(message, dict) or message.get("type", "message") != "message":
        return None
    team = message.get("team")
    payload = {
        "type": "event_callback",
        "team_id": team if isinstance(team, str) else None,
        "event": {**message, "type": "message", "channel": channel},
    }
    return to_inbound(made_valid(payload, profile=profile), profile=profile, own_ids=own_ids)
