"""The Matrix provider: posts, edits and threads over the client-server API, inbound by ``/sync``.

Every create is ``PUT /rooms/{room}/send/m.room.message/{txnId}``. For a ledger reply the
transaction id is derived from the core's ``post_key()`` (the obligation and the part), so the
resend after a crash is recognised by the homeserver and answered with the first event's id
instead of a second message, as long as the homeserver still holds the transaction (Synapse:
per device, in its database for 24 hours, across restarts; ADR 0081). Other posts get a fresh
random id.

Mentions are made safe twice: every event carries an empty ``m.mentions`` (intentional mentions:
clients and servers that implement them notify nobody), and ``escape`` breaks ``@room`` and the
other mass pings in the body, for clients that still match text. No ``formatted_body`` is sent,
so there is no HTML to neutralise.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
from collections import OrderedDict
from typing import Any

import anyio
import httpx

from bridge_core import (
    ChatProvider,
    ConnectionLost,
    Forbidden,
    InboundSink,
    KeyValueStore,
    LengthUnit,
    MessageRef,
    MessageRejected,
    NotFound,
    ProviderError,
    TransportError,
    Unreachable,
    mapped_call,
    measure,
    neutralise_mass_mentions,
    post_key,
)
from bridge_matrix.client import MatrixClient, MatrixResponse, event_size, quote, txn_id
from bridge_matrix.errors import Operation, map_error
from bridge_matrix.inbound import (
    SYNC_FILTER,
    SyncPosition,
    after_own_arrival,
    inbound_from_event,
    is_own_arrival,
    joined_timelines,
    kicks_in,
    redacted_by,
)
from bridge_matrix.settings import (
    CAPABILITIES,
    EVENT_BYTES,
    MATRIX_BUDGET,
    MAX_LENGTH,
    MatrixSettings,
)

__all__ = [
    "CAPABILITIES",
    "ENVELOPE_BYTES",
    "MATRIX_BUDGET",
    "MAX_LENGTH",
    "MatrixProvider",
    "MatrixSettings",
]

log = logging.getLogger("bridge_matrix")

ENVELOPE_BYTES = 2048
"""Room kept for what the homeserver adds around the content (room and sender ids, auth and
previous events, hashes, signatures) before the 65,536-byte event limit."""

EDIT_FALLBACK_BYTES = 100
"""How much of the new text an edit repeats in its fallback ``body`` (shown only by clients that
do not understand edits); the full text is in ``m.new_content``."""

_REMEMBERED_POSTS = 10_000  # own posts whose redaction /sync is watched for

GAP_PAGE = 100
"""Events per ``/messages`` request when a room's ``/sync`` timeline was ``limited``."""

GAP_PAGES = 10
"""Most ``/messages`` pages read of one room's gap in one ``/sync``: a gateway down for days in a
busy room would otherwise hand the agent thousands of stale turns and hold every other room's
messages back while it pages. When the homeserver still has events past them (asked with one
more request of one event), the oldest of the gap are skipped, with a warning naming the room."""


class _PositionRefused(ConnectionLost):
    """``/sync`` refused the position it was asked from (a 400), not the connection."""


_ROOM_PING = re.compile(r"@(room)\b", re.IGNORECASE)


def _first_sync_filter() -> dict[str, Any]:
    """The filter of a first ``/sync`` (no position yet): no timeline, only the position.

    Synapse answers a repeated identical ``/sync`` from a response cache for up to two minutes,
    which would hand out a stale position (and replay what came after it); a presence type
    no one sends, unique to this call, makes the request unlike any before it.
    """
    return {
        "presence": {"types": [f"bridge.none.{secrets.token_hex(8)}"]},
        "account_data": {"types": []},
        "room": {"timeline": {"limit": 0}},
    }


def _clip(text: str, limit: int) -> str:
    """The longest prefix of ``text`` within ``limit`` UTF-8 bytes, never splitting a character."""
    return text.encode("utf-8", "surrogatepass")[:limit].decode("utf-8", "ignore")


class MatrixProvider(ChatProvider):
    """One Matrix bot account. The HTTP client is made on first use; ``aclose`` releases it."""

    name = "matrix"
    capabilities = CAPABILITIES

    def __init__(
        self,
        settings: MatrixSettings,
        *,
        profile: str,
        kv: KeyValueStore | None = None,
        api_base_url: str | None = None,
    ) -> None:
        self._settings = settings
        self._profile = profile
        self._base_url = (api_base_url or settings.homeserver_url).rstrip("/")
        self._client: MatrixClient | None = None
        self._position = SyncPosition(kv, user_id=settings.user_id, device_id=settings.device_id)
        self._posted: OrderedDict[str, None] = OrderedDict()  # recent own event ids
        self._redacted: set[str] = set()  # own events seen redacted by /sync

    def __repr__(self) -> str:
        return (
            f"MatrixProvider(profile={self._profile!r}, user_id={self._settings.user_id!r}, "
            f"homeserver_url={self._base_url!r})"
        )

    # ------------------------------------------------------------------ calls

    def _http(self) -> MatrixClient:
        if self._client is None:
            self._client = MatrixClient(
                self._base_url,
                self._settings.access_token.get_secret_value(),
                timeout=self._settings.call_deadline,
            )
        return self._client

    async def _call(
        self,
        operation: Operation,
        where: str,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: dict[str, Any] | None = None,
        deadline: float | None = None,
    ) -> MatrixResponse:
        deadline = deadline or self._settings.call_deadline

        async def call() -> MatrixResponse:
            with anyio.fail_after(deadline):
                return await self._http().request(
                    method, path, body=body, params=params, read_timeout=deadline
                )

        def read(exc: Exception) -> ProviderError | None:
            if isinstance(exc, TimeoutError):
                return TransportError(
                    f"the homeserver did not answer {where} within {deadline:g} s"
                )
            if isinstance(exc, httpx.TimeoutException):
                return TransportError(f"the homeserver did not answer {where} in time")
            if isinstance(exc, httpx.HTTPError):
                return TransportError(f"network failure during {where}: {type(exc).__name__}")
            return None

        # mapped_call raises outside the except block: httpx's exceptions carry the request,
        # whose headers hold the access token, and must not ride along as __context__.
        response = await mapped_call(call, read)
        if response.ok and isinstance(response.body, dict):
            return response
        if response.ok:
            raise TransportError(f"the homeserver answered {where} with no JSON object")
        raise map_error(
            status=response.status,
            body=response.body,
            headers=response.headers,
            operation=operation,
            where=where,
        )

    @staticmethod
    def _room(channel: str) -> str:
        # Room ids start with "!"; since room version 12 they no longer name a server.
        if not channel.startswith("!") or len(channel) < 2:
            raise Unreachable(
                f"channel {channel!r} is not a Matrix room id (!opaque); use the room's "
                "id from its settings (Element: Settings, Advanced), not its alias"
            )
        return channel

    def _check_size(self, text: str, content: dict[str, Any], where: str) -> None:
        size = measure(text, LengthUnit.JSON_UTF8)
        if size > MAX_LENGTH:
            raise MessageRejected(
                f"text for {where} is {size} bytes as sent (JSON in UTF-8), over the "
                f"{MAX_LENGTH} this provider declares: chunk it with "
                "bridge_core.text.prepare before posting"
            )
        encoded = event_size(content) + ENVELOPE_BYTES
        if encoded > EVENT_BYTES:
            raise MessageRejected(
                f"the event for {where} would be about {encoded} bytes of JSON, over the "
                f"homeserver's {EVENT_BYTES} (the text has many characters JSON escapes)"
            )

    # ------------------------------------------------------------------ outbound

    async def post(self, channel: str, text: str, *, thread: str | None = None) -> MessageRef:
        room = self._room(channel)
        key = post_key()
        where = f"post to room {room}" + (f" thread {thread}" if thread else "")
        content: dict[str, Any] = {"msgtype": "m.text", "body": text, "m.mentions": {}}
        if thread is not None:
            content["m.relates_to"] = {
                "rel_type": "m.thread",
                "event_id": thread,
                "is_falling_back": True,
                "m.in_reply_to": {"event_id": thread},
            }
        self._check_size(text, content, where)
        txn = txn_id(key) if key is not None else f"bridge-{secrets.token_hex(20)}"
        path = f"/_matrix/client/v3/rooms/{quote(room)}/send/m.room.message/{txn}"
        answer = await self._call("post", where, "PUT", path, body=content)
        event_id = answer.body.get("event_id")
        if not isinstance(event_id, str):
            raise TransportError(f"the homeserver answered {where} without an event_id")
        self._posted[event_id] = None
        if len(self._posted) > _REMEMBERED_POSTS:
            self._posted.popitem(last=False)
        return MessageRef(channel=channel, message_id=event_id, thread=thread)

    async def edit(self, ref: MessageRef, text: str) -> MessageRef:
        room = self._room(ref.channel)
        where = f"edit of event {ref.message_id} in room {room}"
        # Synapse accepts an edit of a redacted event, which no client shows; the redactions
        # this provider saw by /sync (inbound on) make such an edit NotFound without a request,
        # so the core posts a new message instead. One request per call otherwise.
        if ref.message_id in self._redacted:
            raise NotFound(f"{where}: the event was redacted; post a new message")
        new_content = {"msgtype": "m.text", "body": text, "m.mentions": {}}
        content: dict[str, Any] = {
            "msgtype": "m.text",
            "body": "* " + _clip(text, EDIT_FALLBACK_BYTES),
            "m.mentions": {},
            "m.new_content": new_content,
            "m.relates_to": {"rel_type": "m.replace", "event_id": ref.message_id},
        }
        self._check_size(text, content, where)
        path = (
            f"/_matrix/client/v3/rooms/{quote(room)}/send/m.room.message/"
            f"bridge-edit-{secrets.token_hex(16)}"
        )
        await self._call("edit", where, "PUT", path, body=content)
        return ref

    async def probe(self, channel: str) -> bool | None:
        """Whether the bot is joined to the room (its own membership state event)."""
        room = self._room(channel)
        path = (
            f"/_matrix/client/v3/rooms/{quote(room)}/state/m.room.member/"
            f"{quote(self._settings.user_id)}"
        )
        try:
            answer = await self._call("probe", f"probe of room {room}", "GET", path)
        except (Forbidden, NotFound, Unreachable):
            return False
        return bool(answer.body.get("membership") == "join")

    def escape(self, text: str) -> str:
        # m.mentions = {} already stops every notification on current clients; breaking the
        # words as well keeps older clients (and copies of the text) harmless.
        return _ROOM_PING.sub("@\u200b\\1", neutralise_mass_mentions(text))

    # ------------------------------------------------------------------ inbound

    async def _inbound_call(
        self,
        operation: Operation,
        where: str,
        path: str,
        params: dict[str, Any],
        *,
        deadline: float | None = None,
    ) -> MatrixResponse:
        """A ``GET`` for ``receive``: a refusal is raised as it is (``Unreachable`` for the token,
        ``Forbidden``, ``NotFound`` or ``MessageRejected`` for what was asked); any other failure
        is ``ConnectionLost``, and the rebuilt provider asks again from the stored position."""
        try:
            return await self._call(operation, where, "GET", path, params=params, deadline=deadline)
        except (Unreachable, Forbidden, NotFound, MessageRejected):
            raise
        except ProviderError as exc:
            raise ConnectionLost(f"Matrix {where} failed: {exc}") from None

    async def _sync(self, since: str | None, *, hold: float) -> dict[str, Any]:
        params: dict[str, Any] = {"timeout": int(hold * 1000)}
        if since is None:
            params["filter"] = _json(_first_sync_filter())
        else:
            params["since"] = since
            params["filter"] = _json(SYNC_FILTER)
        try:
            answer = await self._inbound_call(
                "sync",
                "/sync",
                "/_matrix/client/v3/sync",
                params,
                deadline=hold + self._settings.call_deadline,
            )
        except MessageRejected as exc:
            if since is not None:
                raise _PositionRefused(f"Matrix /sync refused the position: {exc}") from None
            raise ConnectionLost(f"Matrix /sync failed: {exc}") from None
        except (Forbidden, NotFound) as exc:
            # Not one room's answer: skipping it would skip every room, so it is asked again.
            raise ConnectionLost(f"Matrix /sync failed: {exc}") from None
        if not isinstance(answer.body.get("next_batch"), str):
            raise ConnectionLost("Matrix /sync answered without next_batch")
        return dict(answer.body)

    async def receive(self, sink: InboundSink) -> None:
        """Hand people's room messages to ``sink`` until cancelled; raise ``ConnectionLost`` when
        ``/sync`` fails (the core's watcher builds a new provider, which resumes from the stored
        position) or ``Unreachable`` when the token is refused.

        The position is stored only after every event of a batch reached the sink: a crash in
        between replays that batch, and the core's dedup drops what it already had. That
        includes the gap of a ``limited`` timeline, read back by ``_gap`` before the timeline's
        own events.
        """
        if not self._settings.inbound:
            return
        since = await self._position.load()
        fresh = since is None
        if since is None:
            # First start of this account here: begin at "now"; history is not turns.
            since = await self._start_at_now()
        own = self._settings.user_id
        log.info("matrix profile %s: receiving by /sync as %s", self._profile, own)
        while True:
            try:
                batch = await self._sync(since, hold=self._settings.sync_timeout)
            except _PositionRefused as exc:
                # A position the server just handed out is not what it refuses: asking again
                # from "now" would loop, losing messages each time, so the watcher backs off.
                if fresh:
                    raise
                # Synapse answers 400 "Invalid stream token" for a position it cannot read
                # (another server behind the same name, a restored database). Asking with it
                # again would fail for ever, so inbound starts again from now, loudly.
                log.warning(
                    "matrix profile %s: the homeserver refused the stored /sync position (%s); "
                    "starting from now: messages sent since that position are not delivered",
                    self._profile,
                    exc,
                )
                since, fresh = await self._start_at_now(), True
                continue
            fresh = False
            for timeline in joined_timelines(batch):
                events = after_own_arrival(timeline.events, own)
                if events is None:
                    events = timeline.events
                    # A limited timeline starts after a gap the server left out; a room the bot
                    # just joined is not read back (what came before the join is history).
                    if timeline.limited and timeline.prev_batch is not None:
                        gap = await self._gap(timeline.room_id, timeline.prev_batch, since)
                        events = gap + events
                await self._deliver(sink, timeline.room_id, events)
            for room_id, event in kicks_in(batch, own):
                membership = event.get("content", {}).get("membership")
                log.warning(
                    "matrix profile %s: %s %s room %s (by %s); sends there now fail as Forbidden",
                    self._profile,
                    own,
                    {"ban": "was banned from", "leave": "left or was kicked from"}.get(
                        str(membership), f"has membership {membership!r} in"
                    ),
                    room_id,
                    event.get("sender"),
                )
            if batch["next_batch"] != since:  # an empty long-poll moves nothing: no write
                since = str(batch["next_batch"])
                await self._position.save(since)

    async def _start_at_now(self) -> str:
        """A position at "now" (a first ``/sync`` without a timeline), stored."""
        since = str((await self._sync(None, hold=0))["next_batch"])
        await self._position.save(since)
        return since

    async def _gap(self, room_id: str, prev_batch: str, since: str) -> list[dict[str, Any]]:
        """The room's events between ``since`` and ``prev_batch`` (a limited timeline's gap),
        oldest first: ``/messages`` backwards from ``prev_batch`` to ``since``, one request per
        page, at most ``GAP_PAGES`` pages, stopping at the bot's own arrival."""
        params: dict[str, Any] = {
            "dir": "b",
            "from": prev_batch,
            "to": since,
            "limit": GAP_PAGE,
            "filter": _json({"types": SYNC_FILTER["room"]["timeline"]["types"]}),
        }
        newest_first: list[dict[str, Any]] = []
        for _ in range(GAP_PAGES):
            page = await self._history(room_id, params)
            if page is None:
                return newest_first[::-1]
            events, end = page
            for event in events:
                if is_own_arrival(event, self._settings.user_id):
                    return newest_first[::-1]  # before it the bot was not in the room
                newest_first.append(event)
            # Only a missing end ends the history: the spec lets a page come back empty while
            # more follows (Synapse, when every event of it is hidden from the bot).
            if end is None:
                return newest_first[::-1]
            params["from"] = end
        # The page that reaches `to` keeps its end (Synapse drops it only from the empty page
        # after), so one more event is asked for: the gap may have been exactly read.
        left = await self._history(room_id, {**params, "limit": 1})
        past = left[0][:1] if left is not None else []
        if past and not is_own_arrival(past[0], self._settings.user_id):
            log.warning(
                "matrix profile %s: room %s had more than %d events while inbound was behind; "
                "the older ones are not delivered",
                self._profile,
                room_id,
                len(newest_first),
            )
        return newest_first[::-1]

    async def _history(
        self, room_id: str, params: dict[str, Any]
    ) -> tuple[list[dict[str, Any]], str | None] | None:
        """One ``/messages`` page of ``room_id``: its events as the server ordered them and its
        ``end``; ``None`` when the homeserver refuses that room's history (logged)."""
        where = f"/messages of room {room_id}"
        path = f"/_matrix/client/v3/rooms/{quote(room_id)}/messages"
        try:
            answer = await self._inbound_call("history", where, path, params)
        except (Forbidden, NotFound, MessageRejected) as exc:
            # Raising would rebuild the provider into the same gap and the same refusal,
            # stopping inbound for every room (for good, as Unreachable); this room's gap
            # is what cannot be read. A refused token is still Unreachable.
            log.warning(
                "matrix profile %s: the gap in room %s cannot be read (%s: %s); "
                "messages sent there while inbound was behind are not delivered",
                self._profile,
                room_id,
                type(exc).__name__,
                exc,
            )
            return None
        chunk, end = answer.body.get("chunk"), answer.body.get("end")
        events = [e for e in chunk if isinstance(e, dict)] if isinstance(chunk, list) else []
        return events, end if isinstance(end, str) else None

    async def _deliver(self, sink: InboundSink, room_id: str, events: list[dict[str, Any]]) -> None:
        own = self._settings.user_id
        for event in events:
            redacted = redacted_by(event)
            if redacted is not None and redacted in self._posted:
                self._redacted.add(redacted)
                del self._posted[redacted]
            message = inbound_from_event(room_id, event, profile=self._profile, own_user_id=own)
            # The bridge's own posts and other bots' notices are never user turns.
            if message is not None and not message.author_is_bot:
                await sink(message)

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))
