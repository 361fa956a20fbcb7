"""A fake {{ cookiecutter.provider_name }} REST API over real local HTTP, on bridge-core's kit.

It validates what the real platform would (the token, the JSON body, the text's length, that the
channel and the message exist) and answers with the documented bodies, so a provider that sends
the wrong thing fails its tests. FILL IN: keep it in step with ``client.py``'s API.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from bridge_core.testing import FakePlatform, RecordedRequest, Reply

__all__ = ["CHANNEL", "TOKEN", "FakeApi", "error"]

TOKEN = "test-token-7f3a9c"  # a secret the conformance suite checks never leaks
CHANNEL = "C-general"
MAX_TEXT = 4000  # the platform's documented limit


def error(code: str, status: int, *, headers: dict[str, str] | None = None) -> Reply:
    """An error answer in the platform's format."""
    return Reply.json(
        {"error": {"code": code, "message": code.replace("_", " ")}},
        status=status,
        headers=headers,
    )


@dataclass
class Message:
    id: str
    text: str
    thread_id: str | None = None


@dataclass
class Channel:
    id: str
    member: bool = True
    messages: list[Message] = field(default_factory=list)


class FakeApi(FakePlatform):
    """Routes ``post_message``, ``edit_message`` and ``get_channel`` under ``/v1``."""

    name = "{{ cookiecutter.__provider }}"

    def __init__(self, *, token: str = TOKEN) -> None:
        super().__init__()
        self.token = token
        self.channels: dict[str, Channel] = {}
        self._ids = itertools.count(1)
        self.add_route("POST", "/v1/channels/{channel}/messages", self._post, name="post_message")
        self.add_route(
            "PATCH", "/v1/channels/{channel}/messages/{message}", self._edit, name="edit_message"
        )
        self.add_route("GET", "/v1/channels/{channel}", self._get_channel, name="get_channel")

    @property
    def api_base(self) -> str:
        return self.url("/v1")

    def add_channel(self, channel_id: str, *, member: bool = True) -> None:
        with self.lock:
            self.channels[channel_id] = Channel(channel_id, member=member)

    def texts(self, channel_id: str) -> list[str]:
        """The current text of every message in a channel, oldest first."""
        with self.lock:
            return [m.text for m in self.channels[channel_id].messages]

    # ----------------------------------------------------------------- validation

    def _refusal(self, request: RecordedRequest, *, body: bool) -> Reply | None:
        if request.header("Authorization") != f"Bearer {self.token}":
            return error("not_authed", 401)
        channel = self.channels.get(request.params["channel"])
        if channel is None:
            return error("channel_not_found", 404)
        if not channel.member:
            return error("not_in_channel", 403)
        if body:
            if request.content_type != "application/json":
                return error("invalid_request", 400)
            try:
                payload = request.json
            except ValueError:
                return error("invalid_request", 400)
            text = payload.get("text") if isinstance(payload, dict) else None
            if not isinstance(text, str) or not text:
                return error("invalid_request", 400)
            if len(text) > MAX_TEXT:
                return error("text_too_long", 400)
        return None

    # ----------------------------------------------------------------- routes

    def _post(self, request: RecordedRequest) -> Reply:
        with self.lock:
            refused = self._refusal(request, body=True)
            if refused is not None:
                return refused
            channel = self.channels[request.params["channel"]]
            payload = request.json
            thread_id = payload.get("thread_id")
            if thread_id is not None and not any(m.id == thread_id for m in channel.messages):
                return error("message_not_found", 404)
            message = Message(f"m{next(self._ids)}", payload["text"], thread_id)
            channel.messages.append(message)
            return Reply.json(
                {"id": message.id, "channel": channel.id, "thread_id": thread_id}, status=201
            )

    def _edit(self, request: RecordedRequest) -> Reply:
        with self.lock:
            refused = self._refusal(request, body=True)
            if refused is not None:
                return refused
            channel = self.channels[request.params["channel"]]
            for message in channel.messages:
                if message.id == request.params["message"]:
                    message.text = request.json["text"]
                    return Reply.json({"id": message.id, "channel": channel.id})
            return error("message_not_found", 404)

    def _get_channel(self, request: RecordedRequest) -> Reply:
        with self.lock:
            refused = self._refusal(request, body=False)
            if refused is not None:
                return refused
            return Reply.json({"id": request.params["channel"], "can_post": True})
