"""A fake Discord (REST API v10 and a gateway websocket) for testing the Discord provider.

It validates what Discord validates: the ``Authorization: Bot <token>`` header, a JSON body,
``content`` at most 2,000 characters, a ``nonce`` of at most 25 characters; it answers with
Discord's documented bodies and error codes, keeps the channels and messages it was given, honours
``enforce_nonce`` (a repeated create with the same nonce returns the first message), and paces
message creates per channel like Discord does (5 per 5 s, with ``X-RateLimit-*`` headers and a
429 carrying ``Via`` and a JSON body, so discord.py reads it as a rate limit, not a ban).

Point discord.py at it with the provider's ``api_base_url=fake.api_base`` and
``gateway_url=fake.gateway_url``. Script faults with ``fake.script(route, ...)`` using
``FakeDiscord.error(...)`` and ``FakeDiscord.rate_limited(...)``; make the next creates succeed
but lose their answer with ``fake.lose_responses(n)`` (a resend with the same nonce then finds it).

Routes (names for ``script`` and ``requests_to``): ``create_message``, ``edit_message``,
``get_channel``, ``list_messages`` (``bridge_discord.testing.fake_history``), ``get_me``,
``get_application``, ``gateway``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any

from aiohttp import WSMsgType, web

from bridge_core.testing import FakePlatform, RecordedRequest, Reply
from bridge_discord.testing.fake_history import list_messages

__all__ = ["DISCORD_EPOCH_MS", "FakeDiscord", "FakeDiscordChannel"]

DISCORD_EPOCH_MS = 1_420_070_400_000
_API = "/api/v10"

# Gateway opcodes.
_DISPATCH, _HEARTBEAT, _IDENTIFY, _RESUME, _HELLO, _HEARTBEAT_ACK = 0, 1, 2, 6, 10, 11
_MESSAGE_CONTENT_INTENT = 1 << 15


@dataclass(slots=True)
class FakeDiscordChannel:
    id: int
    guild_id: int
    name: str = "general"
    parent_id: int | None = None  # set for a thread
    visible: bool = True  # False: the bot cannot see it (50001)
    can_send: bool = True  # False: the bot may not send in it (50013)
    archived: bool = False  # threads only (50083)
    read_history: bool = True  # False: no Read Message History, its history reads as empty
    message_ids: list[int] = field(default_factory=list)

    @property
    def is_thread(self) -> bool:
        return self.parent_id is not None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "id": str(self.id),
            "guild_id": str(self.guild_id),
            "name": self.name,
            "type": 11 if self.is_thread else 0,
            "position": 0,
            "permission_overwrites": [],
            "nsfw": False,
            "rate_limit_per_user": 0,
            "flags": 0,
            "last_message_id": str(max(self.message_ids)) if self.message_ids else None,
        }
        if self.is_thread:
            data["parent_id"] = str(self.parent_id)
            data["owner_id"] = "1"
            data["message_count"] = len(self.message_ids)
            data["member_count"] = 1
            data["thread_metadata"] = {
                "archived": self.archived,
                "auto_archive_duration": 1440,
                "archive_timestamp": datetime.now(UTC).isoformat(),
                "locked": False,
            }
        return data


class FakeDiscord(FakePlatform):
    """Discord's REST API and gateway, enough for a bot that posts, edits and listens."""

    name = "discord"

    def __init__(
        self,
        *,
        token: str = "fake-discord-bot-token",
        bot_id: int = 900_000_000_000_000_001,
        guild_id: int = 800_000_000_000_000_001,
        channel_limit: int | None = 5,
        channel_window: float = 5.0,
        message_content_allowed: bool = True,
    ) -> None:
        super().__init__()
        self.token = token
        self.bot_id = bot_id
        self.guild_id = guild_id
        self.channel_limit = channel_limit
        self.channel_window = channel_window
        self.message_content_allowed = message_content_allowed
        self.channels: dict[int, FakeDiscordChannel] = {}
        self.messages: dict[int, dict[str, Any]] = {}
        self.rate_limited_creates = 0  # 429s the fake's own pacing answered
        self._nonces: dict[tuple[int, str], int] = {}
        self._creates: dict[int, deque[float]] = {}
        self._lose = 0
        self._sequence = itertools.count(1)
        self._snowflake_counter = itertools.count(1)
        self._sockets: list[web.WebSocketResponse] = []
        self._gateway_ready = threading.Condition(self.lock)
        self._ready_sent = 0
        self._resumed = threading.Event()
        self.identify_payloads: list[dict[str, Any]] = []
        self.resume_payloads: list[dict[str, Any]] = []
        self.gateway_available = True  # False: the gateway answers 503 and accepts no socket
        self.history_hold: threading.Event | None = None  # set: list_messages answers
        self.history_limit: int | None = None  # reads per channel per history_window
        self.history_window = 1.0
        self.rate_limited_history = 0  # 429s the history pacing answered
        self._history_reads: dict[str, deque[float]] = {}
        self.add_route("GET", f"{_API}/users/@me", self._get_me, name="get_me")
        self.add_route(
            "GET", f"{_API}/oauth2/applications/@me", self._get_application, name="get_application"
        )
        self.add_route(
            "POST", f"{_API}/channels/{{channel_id}}/messages", self._create, name="create_message"
        )
        self.add_route(
            "PATCH",
            f"{_API}/channels/{{channel_id}}/messages/{{message_id}}",
            self._edit,
            name="edit_message",
        )
        self.add_route(
            "GET", f"{_API}/channels/{{channel_id}}", self._get_channel, name="get_channel"
        )
        self.add_route(
            "GET",
            f"{_API}/channels/{{channel_id}}/messages",
            partial(list_messages, self),
            name="list_messages",
        )
        self.add_raw_route("GET", "/gateway", self._gateway, name="gateway")

    # ----------------------------------------------------------------- setup and helpers

    @property
    def api_base(self) -> str:
        return self.base_url + _API

    @property
    def gateway_url(self) -> str:
        return f"ws://{self.host}:{self.port}/gateway"

    def add_channel(self, channel_id: int, **options: Any) -> FakeDiscordChannel:
        with self.lock:
            channel = FakeDiscordChannel(id=channel_id, guild_id=self.guild_id, **options)
            self.channels[channel_id] = channel
            return channel

    def add_thread(self, thread_id: int, *, parent_id: int, **options: Any) -> FakeDiscordChannel:
        return self.add_channel(thread_id, parent_id=parent_id, name="a thread", **options)

    def messages_in(self, channel_id: int) -> list[dict[str, Any]]:
        with self.lock:
            channel = self.channels[channel_id]
            return [self.messages[mid] for mid in channel.message_ids]

    def lose_responses(self, count: int = 1) -> None:
        """Apply the next ``count`` creates but answer each with a 500, as when Discord's edge
        loses the answer: only a nonce-aware resend avoids a duplicate."""
        with self.lock:
            self._lose += count

    def snowflake(self) -> int:
        millis = int(time.time() * 1000) - DISCORD_EPOCH_MS
        return (millis << 22) | (next(self._snowflake_counter) & 0x3FFFFF)

    @staticmethod
    def error(status: int, code: int, message: str) -> Reply:
        """A Discord error answer: ``{"message": ..., "code": ...}``."""
        return Reply.json({"message": message, "code": code}, status=status)

    @staticmethod
    def rate_limited(retry_after: float, *, is_global: bool = False) -> Reply:
        """A 429 as Discord sends it: ``Via`` and ``Retry-After`` headers, a JSON body."""
        scope = "global" if is_global else "user"
        return Reply.json(
            {
                "message": "You are being rate limited.",
                "retry_after": retry_after,
                "global": is_global,
            },
            status=429,
            headers={
                "Via": "1.1 google",
                "Retry-After": f"{retry_after:g}",
                "X-RateLimit-Scope": scope,
                "X-RateLimit-Global": "true" if is_global else "false",
            },
        )

    def user_json(
        self, user_id: int | None = None, *, bot: bool = True, name: str = ""
    ) -> dict[str, Any]:
        uid = self.bot_id if user_id is None else user_id
        return {
            "id": str(uid),
            "username": name or ("bridge-bot" if uid == self.bot_id else f"user{uid}"),
            "discriminator": "0",
            "global_name": None,
            "avatar": None,
            "bot": bot,
        }

    def _message_json(
        self, message_id: int, channel: FakeDiscordChannel, content: str, author: dict[str, Any]
    ) -> dict[str, Any]:
        return {
            "id": str(message_id),
            "channel_id": str(channel.id),
            "guild_id": str(channel.guild_id),
            "author": author,
            "content": content,
            "timestamp": datetime.now(UTC).isoformat(),
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": False,
            "mentions": [],
            "mention_roles": [],
            "attachments": [],
            "embeds": [],
            "pinned": False,
            "type": 0,
            "flags": 0,
        }

    # ----------------------------------------------------------------- validation

    def _unauthorized(self, request: RecordedRequest) -> Reply | None:
        if request.header("Authorization") != f"Bot {self.token}":
            return self.error(401, 0, "401: Unauthorized")
        return None

    def _json_body(self, request: RecordedRequest) -> dict[str, Any] | Reply:
        if request.content_type != "application/json":
            return self.error(400, 50109, "The request body contains invalid JSON.")
        try:
            body = request.json
        except ValueError:
            return self.error(400, 50109, "The request body contains invalid JSON.")
        if not isinstance(body, dict):
            return self.error(400, 50035, "Invalid Form Body")
        return body

    def _channel(self, request: RecordedRequest, *, sending: bool) -> FakeDiscordChannel | Reply:
        try:
            channel_id = int(request.params["channel_id"])
        except ValueError:
            return self.error(400, 50035, "Invalid Form Body (channel_id is not snowflake)")
        channel = self.channels.get(channel_id)
        if channel is None:
            return self.error(404, 10003, "Unknown Channel")
        if not channel.visible:
            return self.error(403, 50001, "Missing Access")
        if sending and not channel.can_send:
            return self.error(403, 50013, "Missing Permissions")
        if sending and channel.archived:
            return self.error(400, 50083, "Thread is archived")
        return channel

    @staticmethod
    def _content_error(body: Mapping[str, Any]) -> Reply | None:
        content = body.get("content")
        if not isinstance(content, str) or content == "":
            return FakeDiscord.error(400, 50006, "Cannot send an empty message")
        if len(content) > 2000:
            return Reply.json(
                {
                    "message": "Invalid Form Body",
                    "code": 50035,
                    "errors": {
                        "content": {
                            "_errors": [
                                {
                                    "code": "BASE_TYPE_MAX_LENGTH",
                                    "message": "Must be 2000 or fewer in length.",
                                }
                            ]
                        }
                    },
                },
                status=400,
            )
        return None

    def _pace(self, channel_id: int) -> tuple[Reply | None, dict[str, str]]:
        """Discord's per-channel create limit; the headers discord.py reads to pace itself."""
        if self.channel_limit is None:
            return None, {}
        now = time.monotonic()
        recent = self._creates.setdefault(channel_id, deque())
        while recent and now - recent[0] >= self.channel_window:
            recent.popleft()
        if len(recent) >= self.channel_limit:
            retry = self.channel_window - (now - recent[0])
            self.rate_limited_creates += 1
            reply = self.rate_limited(round(retry, 3))
            headers = dict(reply.headers)
            headers.update(self._ratelimit_headers(0, retry))
            return Reply.json(json.loads(reply.body), status=429, headers=headers), {}
        recent.append(now)
        reset_after = self.channel_window - (now - recent[0])
        return None, self._ratelimit_headers(self.channel_limit - len(recent), reset_after)

    def _ratelimit_headers(self, remaining: int, reset_after: float) -> dict[str, str]:
        return {
            "X-RateLimit-Limit": str(self.channel_limit),
            "X-RateLimit-Remaining": str(remaining),
            "X-RateLimit-Reset-After": f"{max(reset_after, 0.001):.3f}",
            "X-RateLimit-Reset": f"{time.time() + max(reset_after, 0.001):.3f}",
            "X-RateLimit-Bucket": "fake-create-message",
        }

    # ----------------------------------------------------------------- REST routes

    def _get_me(self, request: RecordedRequest) -> Reply:
        return self._unauthorized(request) or Reply.json(self.user_json())

    def _get_application(self, request: RecordedRequest) -> Reply:
        denied = self._unauthorized(request)
        if denied:
            return denied
        return Reply.json(
            {
                "id": str(self.bot_id),
                "name": "bridge-bot",
                "description": "",
                "icon": None,
                "bot_public": False,
                "bot_require_code_grant": False,
                "owner": self.user_json(1, bot=False, name="owner"),
                "verify_key": "0" * 64,
                "flags": 0,
            }
        )

    def _get_channel(self, request: RecordedRequest) -> Reply:
        denied = self._unauthorized(request)
        if denied:
            return denied
        with self.lock:
            channel = self._channel(request, sending=False)
            if isinstance(channel, Reply):
                return channel
            return Reply.json(channel.to_json())

    def _create(self, request: RecordedRequest) -> Reply:
        denied = self._unauthorized(request)
        if denied:
            return denied
        body = self._json_body(request)
        if isinstance(body, Reply):
            return body
        with self.lock:
            channel = self._channel(request, sending=True)
            if isinstance(channel, Reply):
                return channel
            invalid = self._content_error(body)
            if invalid:
                return invalid
            nonce = body.get("nonce")
            if nonce is not None and (not isinstance(nonce, str | int) or len(str(nonce)) > 25):
                return self.error(400, 50035, "Invalid Form Body (nonce)")
            if nonce is not None and body.get("enforce_nonce"):
                earlier = self._nonces.get((channel.id, str(nonce)))
                if earlier is not None:
                    return Reply.json(self.messages[earlier])
            limited, headers = self._pace(channel.id)
            if limited:
                return limited
            message_id = self.snowflake()
            message = self._message_json(message_id, channel, body["content"], self.user_json())
            if nonce is not None:
                message["nonce"] = str(nonce)
                self._nonces[(channel.id, str(nonce))] = message_id
            self.messages[message_id] = message
            channel.message_ids.append(message_id)
            if self._lose > 0:
                self._lose -= 1
                return self.error(500, 0, "500: Internal Server Error")
            return Reply.json(message, headers=headers)

    def _edit(self, request: RecordedRequest) -> Reply:
        denied = self._unauthorized(request)
        if denied:
            return denied
        body = self._json_body(request)
        if isinstance(body, Reply):
            return body
        with self.lock:
            channel = self._channel(request, sending=True)
            if isinstance(channel, Reply):
                return channel
            try:
                message_id = int(request.params["message_id"])
            except ValueError:
                return self.error(404, 10008, "Unknown Message")
            message = self.messages.get(message_id)
            if message is None or message_id not in channel.message_ids:
                return self.error(404, 10008, "Unknown Message")
            if message["author"]["id"] != str(self.bot_id):
                return self.error(403, 50005, "Cannot edit a message authored by another user")
            invalid = self._content_error(body)
            if invalid:
                return invalid
            message["content"] = body["content"]
            message["edited_timestamp"] = datetime.now(UTC).isoformat()
            return Reply.json(message)

    # ----------------------------------------------------------------- the gateway

    def emit_message(
        self,
        channel_id: int,
        content: str,
        *,
        author_id: int = 700_000_000_000_000_001,
        bot: bool = False,
        webhook: bool = False,
        message_type: int = 0,
        message_id: int | None = None,
    ) -> int:
        """A user (or bot) writes in ``channel_id``: stored, and sent to every identified gateway
        connection as ``MESSAGE_CREATE``. Returns the message id; passing an earlier one sends
        that message again (as a gateway replay after a resume does)."""
        with self.lock:
            channel = self.channels[channel_id]
            message_id = message_id if message_id is not None else self.snowflake()
            author = self.user_json(author_id, bot=bot or author_id == self.bot_id)
            message = self._message_json(message_id, channel, content, author)
            message["type"] = message_type
            if webhook:
                message["webhook_id"] = str(author_id)
            message["member"] = {"roles": [], "joined_at": datetime.now(UTC).isoformat()}
            if message_id not in self.messages:
                channel.message_ids.append(message_id)
            self.messages[message_id] = message
        self.dispatch_event("MESSAGE_CREATE", message)
        return message_id

    def dispatch_event(self, event: str, data: Mapping[str, Any]) -> None:
        """Send a dispatch to every identified gateway connection (from any thread)."""
        payload = {"op": _DISPATCH, "t": event, "s": next(self._sequence), "d": dict(data)}
        self._send_all(payload)

    def close_gateway(self, code: int = 4000) -> None:
        """Close every gateway connection with ``code``: 4000 (unknown error) and most 4xxx
        codes are resumable, and discord.py resumes by itself; 1000 ends the session."""
        loop = self._loop
        if loop is None:
            return
        for socket in list(self._sockets):
            asyncio.run_coroutine_threadsafe(socket.close(code=code), loop).result(timeout=5.0)

    def invalidate_sessions(self) -> None:
        """Send INVALID_SESSION (``d: false``, not resumable) on every gateway connection, as
        Discord does when it drops a session: the client IDENTIFYs again and gets a new READY."""
        self._send_all({"op": 9, "d": False})

    @property
    def identified_connections(self) -> int:
        """Gateway connections that identified and got READY so far."""
        with self.lock:
            return self._ready_sent

    def wait_identified(self, timeout: float = 5.0, *, count: int = 1) -> None:
        """Block until ``count`` gateway connections have identified (ever, not at once)."""
        with self._gateway_ready:
            if not self._gateway_ready.wait_for(lambda: self._ready_sent >= count, timeout):
                raise TimeoutError(f"fewer than {count} gateway IDENTIFYs within {timeout} s")

    def wait_resumed(self, timeout: float = 5.0) -> None:
        if not self._resumed.wait(timeout):
            raise TimeoutError(f"no gateway RESUME within {timeout} s")

    def _send_all(self, payload: Mapping[str, Any]) -> None:
        loop = self._loop
        if loop is None:
            return
        text = json.dumps(payload)
        for socket in list(self._sockets):
            try:
                asyncio.run_coroutine_threadsafe(socket.send_str(text), loop).result(timeout=5.0)
            except ConnectionResetError:
                pass  # a connection on its way out misses the event, as at Discord

    def _guild_json(self) -> dict[str, Any]:
        with self.lock:
            channels = [c.to_json() for c in self.channels.values() if not c.is_thread]
            threads = [c.to_json() for c in self.channels.values() if c.is_thread]
        return {
            "id": str(self.guild_id),
            "name": "fake guild",
            "unavailable": False,
            "member_count": 2,
            "roles": [],
            "emojis": [],
            "features": [],
            "channels": channels,
            "threads": threads,
            "members": [],
            "voice_states": [],
            "owner_id": "1",
        }

    async def _gateway(self, request: web.Request) -> web.StreamResponse:
        if not self.gateway_available:
            return web.Response(status=503, text="gateway unavailable")
        socket = web.WebSocketResponse()
        await socket.prepare(request)
        await socket.send_str(json.dumps({"op": _HELLO, "d": {"heartbeat_interval": 41250}}))
        try:
            async for frame in socket:
                if frame.type is not WSMsgType.TEXT:
                    continue
                message = json.loads(frame.data)
                op = message.get("op")
                if op == _HEARTBEAT:
                    await socket.send_str(json.dumps({"op": _HEARTBEAT_ACK}))
                elif op == _IDENTIFY:
                    await self._identify(socket, message.get("d") or {})
                elif op == _RESUME:
                    await self._resume(socket, message.get("d") or {})
        finally:
            with self.lock:
                if socket in self._sockets:
                    self._sockets.remove(socket)
        return socket

    async def _resume(self, socket: web.WebSocketResponse, data: dict[str, Any]) -> None:
        self.resume_payloads.append(data)
        if data.get("token") != self.token:
            await socket.close(code=4004, message=b"Authentication failed.")
            return
        if data.get("session_id") != "fake-session":
            # Discord answers an unknown session with INVALID_SESSION (not resumable).
            await socket.send_str(json.dumps({"op": 9, "d": False}))
            return
        frame = {"op": _DISPATCH, "t": "RESUMED", "s": next(self._sequence), "d": {}}
        await socket.send_str(json.dumps(frame))
        with self.lock:
            self._sockets.append(socket)
        self._resumed.set()

    async def _identify(self, socket: web.WebSocketResponse, data: dict[str, Any]) -> None:
        self.identify_payloads.append(data)
        if data.get("token") != self.token:
            await socket.close(code=4004, message=b"Authentication failed.")
            return
        intents = int(data.get("intents", 0))
        if intents & _MESSAGE_CONTENT_INTENT and not self.message_content_allowed:
            await socket.close(code=4014, message=b"Disallowed intent(s).")
            return
        ready = {
            "v": 10,
            "user": self.user_json(),
            "guilds": [{"id": str(self.guild_id), "unavailable": True}],
            "session_id": "fake-session",
            "resume_gateway_url": self.gateway_url,
            "application": {"id": str(self.bot_id), "flags": 0},
        }
        for event, payload in (("READY", ready), ("GUILD_CREATE", self._guild_json())):
            frame = {"op": _DISPATCH, "t": event, "s": next(self._sequence), "d": payload}
            await socket.send_str(json.dumps(frame))
        with self._gateway_ready:
            self._sockets.append(socket)
            self._ready_sent += 1
            self._gateway_ready.notify_all()
