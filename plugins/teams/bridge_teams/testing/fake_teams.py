"""A fake Microsoft Teams (Bot Connector, token service, signing keys) for the Teams provider.

Outbound it serves what the Bot Connector serves: ``POST /v3/conversations/{id}/activities`` and
``PUT /v3/conversations/{id}/activities/{activityId}``, requiring a bearer token the fake's own
token service (``POST /{tenant}/oauth2/v2.0/token``, client credentials) issued and that has not
expired; it stores conversations, reply chains (``<channel>;messageid=<root>``) and activities,
refuses payloads over 28 KB with 413 ``MessageSizeTooBig``, and throttles per conversation with
Teams' documented windows (7/1 s, 8/2 s, 60/30 s, 1,800/h) as 429 ``Throttled`` + ``Retry-After``.

Inbound it plays the channel: an RSA key pair generated per fake, its JWKS at ``/keys`` behind an
OpenID metadata document at ``/openid``, and ``channel_token(...)`` to sign a Bot Framework JWT
(valid, expired, for another app, from a foreign key) for a test to send to the bot's endpoint.

Routes: ``token``, ``openid``, ``jwks``, ``send_activity``, ``update_activity``.
"""

from __future__ import annotations

import itertools
import secrets
import time
import uuid
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from bridge_core.testing import FakePlatform, RecordedRequest, Reply

__all__ = [
    "MAX_PAYLOAD_BYTES",
    "TEAMS_WINDOWS",
    "FakeTeams",
    "FakeTeamsConversation",
    "new_conversation_id",
    "new_signing_key",
]

MAX_PAYLOAD_BYTES = 28 * 1024
TEAMS_WINDOWS: tuple[tuple[int, float], ...] = ((7, 1.0), (8, 2.0), (60, 30.0), (1800, 3600.0))
_ISSUER = "https://api.botframework.com"


@dataclass(slots=True)
class FakeTeamsConversation:
    id: str
    tenant_id: str = "tenant-1"
    bot_in_roster: bool = True  # False: 403 BotNotInConversationRoster
    blocked: bool = False  # True: 403 ConversationBlockedByUser
    activities: dict[str, dict[str, Any]] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)


class FakeTeams(FakePlatform):
    """The Bot Connector and the Bot Framework's token and key services, for one bot."""

    name = "teams"

    def __init__(
        self,
        *,
        app_id: str = "00000000-0000-0000-0000-00000000b07",
        app_password: str = "fake-teams-app-password",
        tenant: str = "botframework.com",
        token_lifetime: float = 3600.0,
        windows: Sequence[tuple[int, float]] | None = TEAMS_WINDOWS,
        signing_key: rsa.RSAPrivateKey | None = None,
    ) -> None:
        super().__init__()
        self.app_id = app_id
        self.app_password = app_password
        self.tenant = tenant
        self.token_lifetime = token_lifetime
        self.windows = tuple(windows or ())
        self.conversations: dict[str, FakeTeamsConversation] = {}
        self.throttled = 0  # 429s the fake's own windows answered
        self.issued_tokens: dict[str, float] = {}  # access token -> expiry (time.time())
        self._sends: dict[str, deque[float]] = {}
        self._ids = itertools.count(1_700_000_000_000)
        # Generating a 2048-bit key takes a CPU-busy moment: share one across a session's fakes.
        self.signing_key = signing_key or new_signing_key()
        self.key_id = "fake-key-1"
        self.endorsements = ["msteams"]
        self.add_route("POST", f"/{tenant}/oauth2/v2.0/token", self._token, name="token")
        self.add_route("GET", "/openid", self._openid, name="openid")
        self.add_route("GET", "/keys", self._jwks, name="jwks")
        self.add_route(
            "POST",
            "/v3/conversations/{conversation_id}/activities",
            self._send,
            name="send_activity",
        )
        self.add_route(
            "PUT",
            "/v3/conversations/{conversation_id}/activities/{activity_id}",
            self._update,
            name="update_activity",
        )

    # ----------------------------------------------------------------- setup and helpers

    @property
    def service_url(self) -> str:
        return self.base_url + "/"

    @property
    def token_url(self) -> str:
        return f"{self.base_url}/{self.tenant}/oauth2/v2.0/token"

    @property
    def openid_url(self) -> str:
        return self.base_url + "/openid"

    @property
    def bot_id(self) -> str:
        return f"28:{self.app_id}"

    def add_conversation(self, conversation_id: str, **options: Any) -> FakeTeamsConversation:
        with self.lock:
            conversation = FakeTeamsConversation(id=conversation_id, **options)
            self.conversations[conversation_id] = conversation
            return conversation

    def texts(self, conversation_id: str) -> list[str]:
        """Current texts of the bot's activities in a conversation (reply chains included)."""
        with self.lock:
            conversation = self.conversations[conversation_id]
            stored = [conversation.activities[a] for a in conversation.order]
            return [str(a.get("text", "")) for a in stored if a.get("from_bot")]

    def activity(self, conversation_id: str, activity_id: str) -> dict[str, Any]:
        with self.lock:
            return self.conversations[conversation_id].activities[activity_id]

    def expire_tokens(self) -> None:
        """Every access token issued so far expires now (the connector then answers 401)."""
        with self.lock:
            for token in self.issued_tokens:
                self.issued_tokens[token] = 0.0

    @staticmethod
    def error(
        status: int, code: str, message: str = "", *, retry_after: float | None = None
    ) -> Reply:
        """A connector error: ``{"error": {"code", "message"}}``, with ``Retry-After`` if given."""
        headers = {"Retry-After": f"{retry_after:g}"} if retry_after is not None else {}
        return Reply.json(
            {"error": {"code": code, "message": message or code}}, status=status, headers=headers
        )

    def jwks(self) -> dict[str, Any]:
        public = RSAAlgorithm.to_jwk(self.signing_key.public_key(), as_dict=True)
        public.update({"kid": self.key_id, "use": "sig", "endorsements": self.endorsements})
        return {"keys": [public]}

    def channel_token(
        self,
        *,
        audience: str | None = None,
        service_url: str | None = None,
        issuer: str = _ISSUER,
        lifetime: float = 3600.0,
        issued_at: float | None = None,
        key: rsa.RSAPrivateKey | None = None,
        kid: str | None = None,
        without: Sequence[str] = (),
    ) -> str:
        """A JWT as the Bot Connector signs it for a request to a bot (without ``Bearer``);
        ``without`` names claims to leave out, as a forged token would."""
        now = time.time() if issued_at is None else issued_at
        claims: dict[str, Any] = {
            "iss": issuer,
            "aud": audience or self.app_id,
            "iat": int(now),
            "nbf": int(now),
            "exp": int(now + lifetime),
            "serviceurl": service_url or self.service_url,
        }
        for name in without:
            claims.pop(name, None)
        return jwt.encode(
            claims,
            key or self.signing_key,
            algorithm="RS256",
            headers={"kid": kid or self.key_id},
        )

    def message_activity(
        self,
        conversation_id: str,
        text: str,
        *,
        author_id: str = "29:user-1",
        author_aad: str | None = "aad-user-1",
        bot_author: bool = False,
        activity_id: str | None = None,
        activity_type: str = "message",
    ) -> dict[str, Any]:
        """A message activity as the connector posts it to the bot's endpoint; stored in the
        conversation (when the fake knows it) so the bot may reply in its chain."""
        conversation = self.conversations.get(conversation_id.split(";", 1)[0])
        author: dict[str, Any] = {"id": self.bot_id if bot_author else author_id, "name": "Someone"}
        if author_aad and not bot_author:
            author["aadObjectId"] = author_aad
        if bot_author:
            author["role"] = "bot"
        activity_id = activity_id or str(next(self._ids))
        if conversation is not None:
            with self.lock:
                if activity_id not in conversation.activities:
                    conversation.order.append(activity_id)
                conversation.activities[activity_id] = {"text": text, "from_bot": bot_author}
        return {
            "type": activity_type,
            "id": activity_id,
            "timestamp": datetime.now(UTC).isoformat(),
            "serviceUrl": self.service_url,
            "channelId": "msteams",
            "from": author,
            "conversation": {
                "id": conversation_id,
                "conversationType": "channel",
                "tenantId": conversation.tenant_id if conversation else "tenant-1",
                "isGroup": True,
            },
            "recipient": {"id": self.bot_id, "name": "Bridge"},
            "text": text,
            "textFormat": "plain",
            "channelData": {"tenant": {"id": "tenant-1"}},
        }

    # ----------------------------------------------------------------- token and keys

    def _token(self, request: RecordedRequest) -> Reply:
        form = request.form
        if request.content_type != "application/x-www-form-urlencoded":
            return Reply.json({"error": "invalid_request"}, status=400)
        if form.get("grant_type") != "client_credentials" or not form.get("scope"):
            return Reply.json({"error": "invalid_request"}, status=400)
        if form.get("client_id") != self.app_id or form.get("client_secret") != self.app_password:
            return Reply.json(
                {"error": "invalid_client", "error_description": "AADSTS7000215: Invalid client"},
                status=401,
            )
        token = secrets.token_urlsafe(24)
        with self.lock:
            self.issued_tokens[token] = time.time() + self.token_lifetime
        return Reply.json(
            {"token_type": "Bearer", "expires_in": int(self.token_lifetime), "access_token": token}
        )

    def _openid(self, request: RecordedRequest) -> Reply:
        return Reply.json(
            {
                "issuer": _ISSUER,
                "jwks_uri": self.base_url + "/keys",
                "id_token_signing_alg_values_supported": ["RS256"],
                "token_endpoint_auth_methods_supported": ["private_key_jwt"],
            }
        )

    def _jwks(self, request: RecordedRequest) -> Reply:
        return Reply.json(self.jwks())

    # ----------------------------------------------------------------- the connector

    def _unauthorized(self, request: RecordedRequest) -> Reply | None:
        header = request.header("Authorization") or ""
        token = header[len("Bearer ") :] if header.startswith("Bearer ") else ""
        with self.lock:
            expiry = self.issued_tokens.get(token)
        if expiry is None or expiry <= time.time():
            denied = {"message": "Authorization has been denied for this request."}
            return Reply.json(denied, status=401)
        return None

    def _body(self, request: RecordedRequest) -> dict[str, Any] | Reply:
        if request.content_type != "application/json":
            return self.error(400, "BadArgument", "Content-Type must be application/json")
        if len(request.body) > MAX_PAYLOAD_BYTES:
            return self.error(413, "MessageSizeTooBig", "Message size too big")
        try:
            body = request.json
        except ValueError:
            return self.error(400, "BadSyntax", "The body is not JSON")
        if not isinstance(body, dict) or body.get("type") != "message":
            return self.error(400, "BadArgument", "Unknown activity type")
        if not isinstance(body.get("text"), str) or not body["text"]:
            return self.error(400, "BadArgument", "Message has no text")
        author = body.get("from") or {}
        if author and author.get("id") not in (None, self.bot_id):
            return self.error(400, "BadArgument", "from.id is not this bot")
        return body

    def _conversation(
        self, request: RecordedRequest
    ) -> tuple[FakeTeamsConversation, str | None] | Reply:
        channel, marker, root = request.params["conversation_id"].partition(";messageid=")
        conversation = self.conversations.get(channel)
        if conversation is None:
            return self.error(404, "ConversationNotFound", "Conversation not found.")
        if conversation.blocked:
            return self.error(403, "ConversationBlockedByUser", "User blocked the conversation")
        if not conversation.bot_in_roster:
            return self.error(403, "BotNotInConversationRoster", "The bot is not in the roster")
        if marker and root not in conversation.activities:
            return self.error(404, "ConversationNotFound", "Reply chain not found.")
        return conversation, (root if marker else None)

    def _throttle(self, conversation_id: str) -> Reply | None:
        if not self.windows:
            return None
        now = time.monotonic()
        recent = self._sends.setdefault(conversation_id, deque())
        longest = max(seconds for _, seconds in self.windows)
        while recent and now - recent[0] >= longest:
            recent.popleft()
        for limit, seconds in self.windows:
            inside = [t for t in recent if now - t < seconds]
            if len(inside) >= limit:
                self.throttled += 1
                retry = max(0.001, seconds - (now - inside[-limit]))
                return self.error(429, "Throttled", "Too many requests", retry_after=retry)
        recent.append(now)
        return None

    def _send(self, request: RecordedRequest) -> Reply:
        denied = self._unauthorized(request)
        if denied:
            return denied
        body = self._body(request)
        if isinstance(body, Reply):
            return body
        with self.lock:
            found = self._conversation(request)
            if isinstance(found, Reply):
                return found
            conversation, root = found
            throttled = self._throttle(conversation.id)
            if throttled:
                return throttled
            activity_id = str(next(self._ids))
            stored = dict(body, id=activity_id, replyToId=root, from_bot=True)
            conversation.activities[activity_id] = stored
            conversation.order.append(activity_id)
        return Reply.json({"id": activity_id}, status=201)

    def _update(self, request: RecordedRequest) -> Reply:
        denied = self._unauthorized(request)
        if denied:
            return denied
        body = self._body(request)
        if isinstance(body, Reply):
            return body
        with self.lock:
            found = self._conversation(request)
            if isinstance(found, Reply):
                return found
            conversation, _ = found
            activity_id = request.params["activity_id"]
            stored = conversation.activities.get(activity_id)
            if stored is None:
                return self.error(404, "ActivityNotFoundInConversation", "Unknown activity")
            if not stored.get("from_bot"):
                return self.error(403, "NotEnoughPermissions", "A bot edits only its messages")
            throttled = self._throttle(conversation.id)
            if throttled:
                return throttled
            stored["text"] = body["text"]
            stored["updated"] = True
        return Reply.json({"id": activity_id})

    def remove_activity(self, conversation_id: str, activity_id: str) -> None:
        """Someone deleted the message: edits of it now answer 404."""
        with self.lock:
            conversation = self.conversations[conversation_id]
            del conversation.activities[activity_id]
            conversation.order.remove(activity_id)


def new_signing_key() -> rsa.RSAPrivateKey:
    """A fresh RSA key as the Bot Framework signs with (RS256, 2048 bits)."""
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def new_conversation_id() -> str:
    """A Teams-shaped channel conversation id."""
    return f"19:{uuid.uuid4().hex}@thread.tacv2"
