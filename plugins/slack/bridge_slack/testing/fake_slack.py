"""A fake Slack Web API (and an Events API client) for testing the Slack provider end to end.

Serves ``/api/auth.test``, ``/api/chat.postMessage``, ``/api/chat.update``,
``/api/chat.startStream``, ``/api/chat.appendStream``, ``/api/chat.stopStream`` and
``/api/conversations.info`` and ``/api/conversations.history`` (``fake_history``) the way Slack
does: the token in ``Authorization: Bearer`` (or a
``token`` form field), parameters from the query string and a form or JSON body, HTTP 200 with
``{"ok": false, "error": "<code>"}`` for every refusal, and HTTP 429 with ``Retry-After`` and
``{"ok": false, "error": "ratelimited"}`` for a rate limit. Point slack-sdk at ``fake.api_url``.

State (channels, messages) is kept so a wrong request fails like it would on Slack: posting to
an unknown channel answers ``channel_not_found``, to a channel the bot is not in
``not_in_channel``, editing an unknown ``ts`` ``message_not_found``, editing someone else's
message ``cant_update_message``, text over 40,000 characters ``msg_too_long``. A streamed
message (``chat.startStream``, which needs a ``thread_ts``) takes ``markdown_text`` appends until
``chat.stopStream``; appending to or stopping a message that is not streaming answers
``message_not_in_streaming_state``, and ``chat.update`` refuses a message still streaming
(``cant_update_message``, an assumption: Slack does not document it). Every streaming call is
recorded in ``FakeSlackMessage.stream`` as ``(method, markdown_text)``.

For inbound tests, ``signed_headers``, ``event_callback`` and ``message_event`` (from
``bridge_slack.testing.slack_events``, re-exported here) build signed Events API requests, and
``push_event`` sends the same payloads over the Socket Mode websocket the fake also serves
(``FakeSocketMode``, its base class).
"""

from __future__ import annotations

import hmac
import itertools
import math
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bridge_core.testing import RecordedRequest, Reply
from bridge_slack.testing.fake_history import HISTORY_PAGE_MAX, conversations_history
from bridge_slack.testing.fake_socket_mode import FakeSocketMode
from bridge_slack.testing.slack_events import event_callback, message_event, signed_headers

__all__ = [
    "SLACK_MAX_TEXT",
    "FakeSlack",
    "FakeSlackChannel",
    "FakeSlackMessage",
    "event_callback",
    "message_event",
    "signed_headers",
]

SLACK_MAX_TEXT = 40_000  # chat.postMessage answers msg_too_long above this


@dataclass(slots=True)
class FakeSlackChannel:
    id: str
    name: str
    member: bool = True
    archived: bool = False
    private: bool = False


@dataclass(slots=True)
class FakeSlackMessage:
    channel: str
    ts: str
    text: str
    user: str
    thread_ts: str | None = None
    edits: list[str] = field(default_factory=list)  # earlier texts, oldest first
    params: dict[str, Any] = field(default_factory=dict)  # everything the poster sent
    streaming: bool = False  # between chat.startStream and chat.stopStream
    stream: list[tuple[str, str | None]] = field(default_factory=list)  # (method, markdown_text)
    fields: dict[str, Any] = field(default_factory=dict)  # more of its JSON (subtype, bot_id)


class FakeSlack(FakeSocketMode):
    """A fake Slack workspace with one bot token, served over local HTTP.

    ``channels`` are created member and unarchived by default; ``add_channel`` adds more.
    """

    name = "slack"

    def __init__(
        self,
        *,
        token: str = "xoxb-fake-bot-token-0000",
        app_token: str = "xapp-1-fake-app-token-0000",
        bot_user_id: str = "U0BRIDGE",
        bot_id: str = "B0BRIDGE",
        team_id: str = "T0FAKE",
        channels: tuple[str, ...] = ("C0GENERAL",),
        host: str = "127.0.0.1",
    ) -> None:
        super().__init__(app_token=app_token, host=host)
        self.token = token
        self.bot_user_id = bot_user_id
        self.bot_id = bot_id
        self.team_id = team_id
        self.channels: dict[str, FakeSlackChannel] = {}
        self.messages: dict[tuple[str, str], FakeSlackMessage] = {}
        self._seq = itertools.count(1)
        self._epoch = int(time.time())
        self._posting_limit: tuple[int, float] | None = None
        self._buckets: dict[str, tuple[float, float]] = {}  # channel -> (tokens, at)
        self.history_page_max = HISTORY_PAGE_MAX
        self.history_hold: threading.Event | None = None
        self.history_refusals: dict[str, str] = {}
        self.history_limit: tuple[int, float] | None = None
        self.history_rate_limited = 0
        self.history_times: list[tuple[float, bool]] = []  # (monotonic, 429)
        self._history_answered: list[float] = []
        for channel in channels:
            self.add_channel(channel)
        for method, route in (
            ("POST", "auth.test"),
            ("*", "chat.postMessage"),
            ("*", "chat.update"),
            ("*", "chat.startStream"),
            ("*", "chat.appendStream"),
            ("*", "chat.stopStream"),
            ("*", "conversations.info"),
        ):
            self.add_route(
                method, f"/api/{route}", getattr(self, "_" + route.replace(".", "_")), name=route
            )
        self.add_route(
            "*",
            "/api/conversations.history",
            lambda request: conversations_history(self, request),
            name="conversations.history",
        )

    @property
    def api_url(self) -> str:
        """The ``base_url`` to give slack-sdk (with its trailing slash)."""
        return self.base_url + "/api/"

    # ----------------------------------------------------------------- state helpers

    def add_channel(
        self,
        channel_id: str,
        *,
        name: str | None = None,
        member: bool = True,
        archived: bool = False,
        private: bool = False,
    ) -> FakeSlackChannel:
        with self.lock:
            channel = FakeSlackChannel(
                channel_id, name or channel_id.lower(), member, archived, private
            )
            self.channels[channel_id] = channel
            return channel

    def limit_posting(self, *, burst: int, per_second: float) -> None:
        """Rate-limit writes (posts and edits) per channel like Slack: a token bucket of
        ``burst`` refilling at ``per_second``; past it, HTTP 429 with ``Retry-After`` (whole
        seconds, rounded up) and ``{"ok": false, "error": "ratelimited"}``."""
        with self.lock:
            self._posting_limit = (burst, per_second)
            self._buckets.clear()

    def _spend(self, channel: str) -> Reply | None:
        if self._posting_limit is None:
            return None
        burst, per_second = self._posting_limit
        now = time.monotonic()
        tokens, at = self._buckets.get(channel, (float(burst), now))
        tokens = min(float(burst), tokens + (now - at) * per_second)
        if tokens < 1.0:
            self._buckets[channel] = (tokens, now)
            return self.rate_limited(max(1, math.ceil((1.0 - tokens) / per_second)))
        self._buckets[channel] = (tokens - 1.0, now)
        return None

    def add_foreign_message(
        self,
        channel: str,
        text: str,
        *,
        user: str = "U0SOMEONE",
        thread_ts: str | None = None,
        **fields: Any,
    ) -> str:
        """A message someone else wrote (the bot may not edit it); returns its ts. ``fields``
        are more of its JSON as ``conversations.history`` lists it (``subtype``, ``bot_id``)."""
        with self.lock:
            ts = self._next_ts()
            self.messages[(channel, ts)] = FakeSlackMessage(
                channel, ts, text, user, thread_ts=thread_ts, fields=dict(fields)
            )
            return ts

    def delete_message(self, channel: str, ts: str) -> None:
        with self.lock:
            del self.messages[(channel, ts)]

    def texts(self, channel: str | None = None) -> list[str]:
        """Current texts of the bot's messages, in posting order."""
        with self.lock:
            return [
                m.text
                for m in self.messages.values()
                if m.user == self.bot_user_id and (channel is None or m.channel == channel)
            ]

    def message(self, channel: str, ts: str) -> FakeSlackMessage:
        with self.lock:
            return self.messages[(channel, ts)]

    # ----------------------------------------------------------------- canned faults

    @staticmethod
    def rate_limited(retry_after: int = 30) -> Reply:
        """Slack's rate-limit answer: HTTP 429, ``Retry-After`` in whole seconds."""
        return Reply.json(
            {"ok": False, "error": "ratelimited"},
            status=429,
            headers={"Retry-After": str(retry_after)},
        )

    @staticmethod
    def server_error(status: int = 503) -> Reply:
        """What Slack's edge answers when it is down: an HTML page, not JSON."""
        return Reply.text(
            "<html><body><h1>Slack is having trouble</h1></body></html>",
            status=status,
            content_type="text/html",
        )

    def unmatched(self, request: RecordedRequest) -> Reply:
        return Reply.json({"ok": False, "error": "unknown_method"}, status=404)

    # ----------------------------------------------------------------- validation

    def _next_ts(self) -> str:
        return f"{self._epoch}.{next(self._seq):06d}"

    def _params(self, request: RecordedRequest) -> dict[str, Any] | Reply:
        params: dict[str, Any] = dict(request.query)
        if request.body:
            if request.content_type == "application/json":
                try:
                    body = request.json
                except ValueError:
                    return self.error("invalid_json")
                if not isinstance(body, dict):
                    return self.error("invalid_json")
                params.update(body)
            elif request.content_type == "application/x-www-form-urlencoded":
                try:
                    params.update(request.form)
                except UnicodeDecodeError:
                    return self.error("invalid_form_data")
            else:
                return self.error("invalid_form_data")
        return params

    def _authorise(self, request: RecordedRequest, params: dict[str, Any]) -> Reply | None:
        header = request.header("Authorization")
        if header is not None:
            scheme, _, token = header.partition(" ")
            if scheme != "Bearer" or not token:
                return self.error("invalid_auth")
        else:
            if request.content_type == "application/json":
                # Slack never reads a token from a JSON body: it must come in the header.
                return self.error("not_authed")
            token = str(params.get("token", ""))
            if not token:
                return self.error("not_authed")
        if not hmac.compare_digest(token, self.token):
            return self.error("invalid_auth")
        return None

    def _prepare(self, request: RecordedRequest) -> dict[str, Any] | Reply:
        params = self._params(request)
        if isinstance(params, Reply):
            return params
        refused = self._authorise(request, params)
        return refused if refused is not None else params

    def _writable(self, channel_id: Any) -> FakeSlackChannel | Reply:
        if not isinstance(channel_id, str) or not channel_id:
            return self.error("channel_not_found")
        channel = self.channels.get(channel_id)
        if channel is None:
            return self.error("channel_not_found")
        if channel.archived:
            return self.error("is_archived")
        if not channel.member:
            return self.error("not_in_channel")
        return channel

    @staticmethod
    def _text(params: Mapping[str, Any]) -> str | Reply:
        text = params.get("text")
        if text is None and not params.get("blocks") and not params.get("attachments"):
            return FakeSlack.error("no_text")
        if text is not None and not isinstance(text, str):
            return FakeSlack.error("invalid_arguments")
        text = text or ""
        if len(text) > SLACK_MAX_TEXT:
            return FakeSlack.error("msg_too_long")
        return text

    # ----------------------------------------------------------------- methods

    def _auth_test(self, request: RecordedRequest) -> Reply:
        with self.lock:
            params = self._prepare(request)
            if isinstance(params, Reply):
                return params
            return self._ok(
                {
                    "url": "https://fake.slack.com/",
                    "team": "Fake Workspace",
                    "user": "bridge",
                    "team_id": self.team_id,
                    "user_id": self.bot_user_id,
                    "bot_id": self.bot_id,
                    "is_enterprise_install": False,
                }
            )

    def _chat_postMessage(self, request: RecordedRequest) -> Reply:
        with self.lock:
            params = self._prepare(request)
            if isinstance(params, Reply):
                return params
            channel = self._writable(params.get("channel"))
            if isinstance(channel, Reply):
                return channel
            text = self._text(params)
            if isinstance(text, Reply):
                return text
            limited = self._spend(channel.id)
            if limited is not None:
                return limited
            thread_ts = params.get("thread_ts")
            if thread_ts is not None and not isinstance(thread_ts, str):
                return self.error("invalid_thread_ts")
            ts = self._next_ts()
            self.messages[(channel.id, ts)] = FakeSlackMessage(
                channel.id, ts, text, self.bot_user_id, thread_ts or None, params=dict(params)
            )
            message: dict[str, Any] = {
                "type": "message",
                "text": text,
                "user": self.bot_user_id,
                "bot_id": self.bot_id,
                "ts": ts,
            }
            if thread_ts:
                message["thread_ts"] = thread_ts
            return self._ok({"channel": channel.id, "ts": ts, "message": message})

    def _chat_update(self, request: RecordedRequest) -> Reply:
        with self.lock:
            params = self._prepare(request)
            if isinstance(params, Reply):
                return params
            channel = self._writable(params.get("channel"))
            if isinstance(channel, Reply):
                return channel
            ts = params.get("ts")
            if not isinstance(ts, str) or not ts:
                return self.error("message_not_found")
            message = self.messages.get((channel.id, ts))
            if message is None:
                return self.error("message_not_found")
            if message.user != self.bot_user_id or message.streaming:
                return self.error("cant_update_message")
            text = self._text(params)
            if isinstance(text, Reply):
                return text
            limited = self._spend(channel.id)
            if limited is not None:
                return limited
            message.edits.append(message.text)
            message.text = text
            return self._ok(
                {"channel": channel.id, "ts": ts, "text": text, "message": {"text": text}}
            )

    @staticmethod
    def _markdown(params: Mapping[str, Any], *, required: bool) -> str | Reply | None:
        text = params.get("markdown_text")
        if text is None:
            return FakeSlack.error("invalid_arguments") if required else None
        if not isinstance(text, str):
            return FakeSlack.error("invalid_arguments")
        if len(text) > 12_000:  # the streaming methods' documented limit per call
            return FakeSlack.error("msg_too_long")
        return text

    def _chat_startStream(self, request: RecordedRequest) -> Reply:
        with self.lock:
            params = self._prepare(request)
            if isinstance(params, Reply):
                return params
            channel = self._writable(params.get("channel"))
            if isinstance(channel, Reply):
                return channel
            thread_ts = params.get("thread_ts")
            if not isinstance(thread_ts, str) or not thread_ts:
                return self.error("invalid_arguments")
            text = self._markdown(params, required=False)
            if isinstance(text, Reply):
                return text
            limited = self._spend(channel.id)
            if limited is not None:
                return limited
            ts = self._next_ts()
            message = FakeSlackMessage(
                channel.id, ts, text or "", self.bot_user_id, thread_ts, params=dict(params)
            )
            message.streaming = True
            message.stream.append(("chat.startStream", text))
            self.messages[(channel.id, ts)] = message
            return self._ok({"channel": channel.id, "ts": ts})

    def _streamed(self, params: Mapping[str, Any]) -> FakeSlackMessage | Reply:
        channel = self._writable(params.get("channel"))
        if isinstance(channel, Reply):
            return channel
        message = self.messages.get((channel.id, str(params.get("ts"))))
        if message is None:
            return self.error("message_not_found")
        if not message.streaming:
            return self.error("message_not_in_streaming_state")
        return message

    def _chat_appendStream(self, request: RecordedRequest) -> Reply:
        return self._stream_call(request, "chat.appendStream", required=True, stop=False)

    def _chat_stopStream(self, request: RecordedRequest) -> Reply:
        return self._stream_call(request, "chat.stopStream", required=False, stop=True)

    def _stream_call(
        self, request: RecordedRequest, method: str, *, required: bool, stop: bool
    ) -> Reply:
        with self.lock:
            params = self._prepare(request)
            if isinstance(params, Reply):
                return params
            message = self._streamed(params)
            if isinstance(message, Reply):
                return message
            text = self._markdown(params, required=required)
            if isinstance(text, Reply):
                return text
            limited = self._spend(message.channel)
            if limited is not None:
                return limited
            message.stream.append((method, text))
            if text:
                message.edits.append(message.text)
                message.text += text
            if stop:
                message.streaming = False
            return self._ok({"channel": message.channel, "ts": message.ts})

    def _conversations_info(self, request: RecordedRequest) -> Reply:
        with self.lock:
            params = self._prepare(request)
            if isinstance(params, Reply):
                return params
            channel = self.channels.get(str(params.get("channel", "")))
            if channel is None:
                return self.error("channel_not_found")
            return self._ok(
                {
                    "channel": {
                        "id": channel.id,
                        "name": channel.name,
                        "is_channel": not channel.private,
                        "is_private": channel.private,
                        "is_archived": channel.archived,
                        "is_member": channel.member,
                    }
                }
            )
