"""A fake homeserver's inbound half, ``/sync`` and ``/rooms/{roomId}/messages``, over local HTTP.

For what a real Synapse cannot be made to show cheaply: a gap of exactly 1,000 events, one room
whose history the server refuses, a page of history hidden from the bot. It is built on the
core's ``bridge_core.testing.FakePlatform``, so faults are scripted per route (``"sync"``,
``"messages"``) and requests are recorded. Point ``MatrixSettings.homeserver_url`` at
``fake.base_url``.

It answers as the client-server API (v1.x) says:

- a token is a place in the one stream of events; ``token()`` is the current one;
- ``/sync`` shows every room with events after ``since``, the newest ``limit`` of them (the
  filter's ``room.timeline``: ``limit``, default 10, and ``types``); more is ``limited``, with
  ``prev_batch`` just before the first shown. Nothing new waits up to ``timeout`` ms;
- ``/messages`` reads ``limit`` events (default 10) of ``filter``'s ``types`` from ``from``
  (default: the newest or oldest end) in ``dir`` (``b`` newest first, ``f`` oldest first), not
  past ``to``. ``start`` is ``from``. ``end`` is left out of an empty page, as Synapse does; with
  ``end_on_last_page=False`` also out of the page that reaches ``to`` or the room's first event
  (the spec allows both). A room not known answers 403 ``M_FORBIDDEN``, as Synapse does.

``ignore(user)`` hides a user's events as Synapse hides an ignored user's: ``/messages`` reads
its page first and drops them after, so a page can come back empty with an ``end``.
``refuse_history(room, ...)`` makes one room's ``/messages`` answer an error.

Exception hierarchy: none of its own (``FakePlatformError`` from the base class).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from dataclasses import dataclass
from typing import Any

from bridge_core.testing import FakePlatform, RecordedRequest, Reply

__all__ = ["FakeHomeserver", "FakeRoomEvent"]

_DEFAULT_LIMIT = 10  # the spec's default for /messages, and Synapse's for a /sync timeline


@dataclass(frozen=True, slots=True)
class FakeRoomEvent:
    """One event of the stream: ``order`` is its place (1 for the first), ``event`` the client
    form the server answers with."""

    order: int
    room_id: str
    event: dict[str, Any]


def _error(status: int, errcode: str | None, error: str) -> Reply:
    return Reply.json({"error": error} | ({"errcode": errcode} if errcode else {}), status=status)


class FakeHomeserver(FakePlatform):
    """One account's view of a homeserver: its rooms (all joined) and their events."""

    name = "matrix"

    def __init__(
        self,
        *,
        user_id: str = "@bot:fake.test",
        access_token: str = "syt_fake_token",
        end_on_last_page: bool = True,
    ) -> None:
        super().__init__()
        self.user_id = user_id
        self.access_token = access_token
        self.end_on_last_page = end_on_last_page
        self.stream: list[FakeRoomEvent] = []
        self.rooms: set[str] = set()
        self.ignored: set[str] = set()
        self.history_refusals: dict[str, Reply] = {}
        self._waiters: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()
        self._ids = itertools.count(1)
        self.add_route("GET", "/_matrix/client/v3/sync", self._sync, name="sync")
        self.add_route(
            "GET", "/_matrix/client/v3/rooms/{room}/messages", self._messages, name="messages"
        )

    # ----------------------------------------------------------------- state

    def token(self) -> str:
        """The stream token of "now" (a ``next_batch``)."""
        with self.lock:
            return f"s{len(self.stream)}"

    def add_room(self, room_id: str) -> str:
        with self.lock:
            self.rooms.add(room_id)
        return room_id

    def add_event(self, room_id: str, event: dict[str, Any]) -> str:
        """Append ``event`` (its ``type``, ``sender``, ``content``...) to the room; its id."""
        with self.lock:
            self.rooms.add(room_id)
            event_id = f"$fake{next(self._ids)}"
            order = len(self.stream) + 1
            full = {
                "event_id": event_id,
                "room_id": room_id,
                "origin_server_ts": 1_700_000_000_000 + order,
                **event,
            }
            self.stream.append(FakeRoomEvent(order, room_id, full))
            for loop, arrived in self._waiters:  # events are added from the test's thread
                loop.call_soon_threadsafe(arrived.set)
        return event_id

    def send_text(self, room_id: str, sender: str, body: str, *, msgtype: str = "m.text") -> str:
        return self.add_event(
            room_id,
            {
                "type": "m.room.message",
                "sender": sender,
                "content": {"msgtype": msgtype, "body": body},
            },
        )

    def join(self, room_id: str, user_id: str, *, before: str | None = None) -> str:
        """``user_id`` joining; ``before`` is its membership until then (``prev_content``)."""
        event: dict[str, Any] = {
            "type": "m.room.member",
            "sender": user_id,
            "state_key": user_id,
            "content": {"membership": "join"},
        }
        if before is not None:
            event["unsigned"] = {"prev_content": {"membership": before}}
        return self.add_event(room_id, event)

    def ignore(self, user_id: str) -> None:
        with self.lock:
            self.ignored.add(user_id)

    def refuse_history(self, room_id: str, status: int, errcode: str | None, error: str) -> None:
        """Answer the room's ``/messages`` with this error from now on (no ``errcode`` with
        ``None``, as a proxy in front of the server answers)."""
        with self.lock:
            self.history_refusals[room_id] = _error(status, errcode, error)

    # ----------------------------------------------------------------- the API

    def _auth(self, request: RecordedRequest) -> Reply | None:
        header = request.header("Authorization") or ""
        if not header.startswith("Bearer "):
            return _error(401, "M_MISSING_TOKEN", "Missing access token.")
        if header.removeprefix("Bearer ") != self.access_token:
            return _error(401, "M_UNKNOWN_TOKEN", "Invalid access token passed.")
        return None

    @staticmethod
    def _place(token: str | None, default: int) -> int | None:
        if token is None:
            return default
        if token.startswith("s") and token[1:].isdigit():
            return int(token[1:])
        return None

    def _visible(self, item: FakeRoomEvent, types: list[str] | None) -> bool:
        return (types is None or item.event.get("type") in types) and (
            item.event.get("sender") not in self.ignored
        )

    async def _sync(self, request: RecordedRequest) -> Reply:
        refused = self._auth(request)
        if refused is not None:
            return refused
        since = self._place(request.query.get("since"), 0)
        try:
            room_filter = json.loads(request.query.get("filter", "{}")).get("room", {})
            timeout = int(request.query.get("timeout", "0")) / 1000
        except (ValueError, AttributeError):
            return _error(400, "M_INVALID_PARAM", "Invalid filter or timeout")
        if since is None:
            return _error(400, "M_INVALID_PARAM", "Invalid stream token")
        timeline = room_filter.get("timeline", {})
        limit = int(timeline.get("limit", _DEFAULT_LIMIT))
        types = timeline.get("types")
        await self._hold(since, timeout)
        with self.lock:
            joined: dict[str, Any] = {}
            for room_id in sorted(self.rooms, key=self._first_order):
                new = [
                    item
                    for item in self.stream[since:]
                    if item.room_id == room_id and self._visible(item, types)
                ]
                if not new:
                    continue
                shown = new[-limit:] if limit > 0 else []
                first = shown[0].order if shown else new[-1].order + 1
                joined[room_id] = {
                    "timeline": {
                        "events": [item.event for item in shown],
                        "limited": len(shown) < len(new),
                        "prev_batch": f"s{first - 1}",
                    }
                }
            return Reply.json({"next_batch": f"s{len(self.stream)}", "rooms": {"join": joined}})

    async def _hold(self, since: int, seconds: float) -> None:
        """The long-poll: a sync with nothing new waits until an event arrives or it times out."""
        waiter = (asyncio.get_running_loop(), asyncio.Event())
        with self.lock:
            if len(self.stream) > since:
                return
            self._waiters.add(waiter)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(waiter[1].wait(), seconds)
        finally:
            with self.lock:
                self._waiters.discard(waiter)

    def _first_order(self, room_id: str) -> int:
        # Rooms are answered in the order they got their first event, so a test knows which
        # one inbound reads first.
        return next((i.order for i in self.stream if i.room_id == room_id), 0)

    def _messages(self, request: RecordedRequest) -> Reply:
        refused = self._auth(request)
        if refused is not None:
            return refused
        room_id = request.params["room"]
        query = request.query
        with self.lock:
            if room_id not in self.rooms:
                return _error(403, "M_FORBIDDEN", "User not in room")
            if room_id in self.history_refusals:
                return self.history_refusals[room_id]
            backwards = query.get("dir") == "b"
            if query.get("dir") not in ("b", "f"):
                return _error(400, "M_INVALID_PARAM", "Unknown direction")
            start = self._place(query.get("from"), len(self.stream) if backwards else 0)
            stop = self._place(query.get("to"), 0 if backwards else len(self.stream))
            try:
                limit = int(query.get("limit", _DEFAULT_LIMIT))
                types = json.loads(query.get("filter", "{}")).get("types")
            except (ValueError, AttributeError):
                return _error(400, "M_INVALID_PARAM", "Invalid limit or filter")
            if start is None or stop is None:
                return _error(400, "M_INVALID_PARAM", "Invalid pagination token")
            low, high = (stop, start) if backwards else (start, stop)
            span = [
                item
                for item in self.stream[low:high]
                if item.room_id == room_id and (types is None or item.event.get("type") in types)
            ]
            if backwards:
                span.reverse()
            page, rest = span[:limit], span[limit:]
            answer: dict[str, Any] = {
                "chunk": [item.event for item in page if self._visible(item, types)],
                "start": query.get("from", f"s{start}"),
            }
            if page and (rest or self.end_on_last_page):
                last = page[-1].order
                answer["end"] = f"s{last - 1}" if backwards else f"s{last}"
            return Reply.json(answer)
