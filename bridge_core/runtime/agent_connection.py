"""One agent connection on ``/v1/agents``: its hello, its members, the turns it holds.

For each turn its members must deliver, the connection sends a ``turn`` message and waits for the
answer: ``reply`` (recorded exactly as an in-process agent's: the ledger row, then the frame, then
an ``ack``, then the send), ``busy`` (the busy notice is recorded as the reply), ``decline`` (a
frame settles the turn, nothing is sent), ``error`` (nothing is recorded: the turn stays pending
and moves if this member leaves). A reply may stream: ``stream`` messages carry deltas, shown
as they come in one message edited at the channel's pace (``StreamedReplies``, the in-process
agents' machinery), and ``final`` ends it (its ``text``, when given, is the whole final text)
and is recorded like a ``reply``, with the partial messages' refs, so its send is the last edit
of those messages. A streamed turn answered otherwise, or left when the connection ends, has
its partial messages marked interrupted (ADR 0092). At most ``concurrency`` (from ``hello``)
turns are out on the socket at once; the rest wait in the members' per-conversation queues, not
in the socket buffer.

How a connection ends decides how its members leave:

- a close frame from the agent, or a close by the gateway (stopping, or a connection that kept
  sending garbage): a graceful leave at once, so its unanswered turns move now;
- a drop (no close frame: the process was killed, the network went, pongs stopped): no leave;
  heartbeats stop and the reaper expires the members after ``expiry``, like a crashed gateway's.

Each answer to a client message (its ``ack``, or the ``error`` refusing it, sent at once or
after the recording) echoes that message's ``id`` as ``re``: ``re_of`` for the errors of
``_on_text``, ``answer.id`` for the answers recorded in ``_await_answer``.

Bad input gets an ``error`` naming the problem (``protocol.ERROR_CODES``) and changes nothing;
``max_bad_messages`` of them in a row close the connection with ``CLOSE_POLICY``. The handlers
are looked up by message type in ``AgentConnection.HANDLERS``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import anyio
from aiohttp import WSMsgType, web
from anyio.abc import TaskGroup

import bridge_core.agent.protocol as p
from bridge_core.conversation import Frame, Turn, obligation_id
from bridge_core.events import UnknownEvent
from bridge_core.ledger import Obligation
from bridge_core.ownership import AgentGroupMember, NotAMember
from bridge_core.runtime.agent_host import AgentHost, AgentSocketSettings, SocketCounts
from bridge_core.runtime.agent_wire import re_of, turn_message
from bridge_core.runtime.channel import ChannelRuntime
from bridge_core.runtime.http_api import ApiError, parse_events_body

__all__ = ["DECLINED", "AgentConnection"]

log = logging.getLogger("bridge_core.runtime.agent_socket")

DECLINED = "declined"
"""The obligation a declined turn's frame carries: it settles the turn, and no ledger row has it."""


@dataclass(slots=True)
class _Held:
    """A turn sent on the socket and not yet answered."""

    turn: Turn
    channel: str
    answer: p.ClientMessage | None = None
    recording: bool = False
    closed: bool = False
    event: anyio.Event = field(default_factory=anyio.Event)
    streamed: str | None = None  # the obligation of the reply it streams, once a delta came
    finished: bool = False  # its stream's final was recorded

    def wake(self) -> None:
        self.event.set()


class _Closed(Exception):
    """The socket closed while sending."""


class AgentConnection:
    """One agent connection: its hello, its members, the turns it holds."""

    HANDLERS: ClassVar[dict[str, str]] = {
        "hello": "_on_second_hello",
        "reply": "_on_answer",
        "busy": "_on_answer",
        "decline": "_on_answer",
        "error": "_on_answer",
        "event": "_on_event",
        "stream": "_on_stream",
        "final": "_on_stream",
    }

    def __init__(
        self,
        host: AgentHost,
        ws: web.WebSocketResponse,
        *,
        settings: AgentSocketSettings,
        counts: SocketCounts,
        agent: str,
        remote: str | None,
    ) -> None:
        self.host = host
        self.settings = settings
        self._counts = counts
        self.ws = ws
        self.agent = agent
        self.remote = remote
        self.hello: p.Hello | None = None
        self.members: dict[str, AgentGroupMember] = {}
        self.held: dict[str, _Held] = {}
        self._send_lock = anyio.Lock()
        self._limiter = anyio.CapacityLimiter(1)
        self._hello_sent = anyio.Event()
        self._members_done = anyio.Event()
        self._members_done.set()
        self._closed = False
        self._graceful = True  # how the socket closed, once ``_closed``
        self._closing_here = False
        self._bad = 0
        self._tg: TaskGroup | None = None

    # ------------------------------------------------------------------ lifecycle

    async def serve(self) -> None:
        async with anyio.create_task_group() as tg:
            self._tg = tg
            tg.start_soon(self._hello_deadline)
            graceful = self._graceful = await self._read_loop()
            self._closed = True
            if graceful:
                self._counts.graceful_closes += 1
            else:
                self._counts.drops += 1
            for held in list(self.held.values()):
                held.closed = True
                held.wake()
            self._leave()
            self._hello_sent.set()  # turns waiting for it see the connection closed
            tg.cancel_scope.deadline = anyio.current_time() + self.settings.drain_timeout + 5.0
            await self._members_done.wait()
            tg.cancel_scope.cancel()

    def _leave(self) -> None:
        """The socket closed: members leave at once (a graceful close) or are left to expire."""
        for member in self.members.values():
            if self._graceful:
                member.stop()
            else:
                member.abandon()

    async def shut_down(self) -> None:
        """The gateway is stopping: members finish their held turns and leave, then close."""
        for member in self.members.values():
            member.stop()
        with anyio.move_on_after(self.settings.drain_timeout + 1.0):
            await self._members_done.wait()
        await self._close(p.CLOSE_GOING_AWAY, "the gateway is stopping; connect to another")

    async def _close(self, code: int, reason: str) -> None:
        self._closing_here = True
        try:
            await self.ws.close(code=code, message=reason.encode()[:120])
        except (ConnectionError, RuntimeError):  # already closed
            pass

    async def _hello_deadline(self) -> None:
        await anyio.sleep(self.settings.hello_timeout)
        if self.hello is None and not self._closed:
            await self._close(
                p.CLOSE_NO_HELLO, f"no valid hello within {self.settings.hello_timeout:g} s"
            )

    async def _read_loop(self) -> bool:
        """Read until the socket closes; True when it closed gracefully (a close frame from the
        agent, or a close by the gateway), False for a drop."""
        while True:
            message = await self.ws.receive()
            if message.type is WSMsgType.TEXT:
                await self._on_text(message.data)
            elif message.type is WSMsgType.BINARY:
                await self._bad_input(
                    p.ProtocolError("malformed", "binary frames are not used; send JSON as text")
                )
            elif message.type is WSMsgType.CLOSE:
                return True
            elif message.type is WSMsgType.CLOSING:
                return True
            else:  # CLOSED or ERROR: no close frame from the agent (or a frame past the limit)
                return self._closing_here or self.ws.close_code == p.CLOSE_TOO_BIG

    # ------------------------------------------------------------------ input

    async def _on_text(self, raw: str) -> None:
        # once read, its type begins every error's message, and its id is every answer's re
        message: p.ClientMessage | None = None
        try:
            message = p.parse_client_message(raw, max_bytes=self.settings.max_message_bytes)
            if self.hello is None and not isinstance(message, p.Hello):
                raise p.ProtocolError(
                    "hello_first",
                    f"{message.type}: send hello first (group, channels, name, concurrency)",
                    turn=getattr(message, "turn", None),
                )
            if self.hello is None and isinstance(message, p.Hello):
                self._on_hello(message)
            else:
                await getattr(self, self.HANDLERS[message.type])(message)
        except p.ProtocolError as error:
            await self._bad_input(error, re=re_of(message, raw))
            return
        except _Closed:
            return  # closed while answering; the read loop sees the close next
        except Exception as error:  # the gateway's fault, not the agent's: not counted as bad
            log.exception(
                "agent %s: a message from %s failed in the gateway", self.agent, self.remote
            )
            kind = message.type if message is not None else "message"
            failed = f"{kind}: the gateway failed on it ({type(error).__name__}); send it again"
            turn = getattr(message, "turn", None)
            await self._send_error(
                p.ProtocolError("unavailable", failed, turn=turn), re=re_of(message, raw)
            )
            return
        self._bad = 0

    async def _bad_input(self, error: p.ProtocolError, *, re: str | None = None) -> None:
        counted = error.code != "not_supported"  # a client trying streaming is not garbage
        if counted:
            self._bad += 1
        await self._send_error(error, re=re)
        if counted and self._bad >= self.settings.max_bad_messages:
            self._counts.closed_for_garbage += 1
            log.warning(
                "agent connection %s (%s) closed: %d bad messages in a row, the last: %s",
                self.agent,
                self.remote,
                self._bad,
                error.message,
            )
            await self._close(
                p.CLOSE_POLICY, f"{self._bad} bad messages in a row; last: {error.code}"
            )

    async def _send_error(self, error: p.ProtocolError, *, re: str | None = None) -> None:
        self._counts.errors_sent += 1
        try:
            await self._send(
                p.ServerError(
                    code=error.code,
                    message=error.message,
                    turn=error.turn,
                    re=re,
                    field=error.field,
                )
            )
        except _Closed:
            pass

    async def _send(self, message: p.ServerMessage) -> None:
        async with self._send_lock:
            if self.ws.closed:
                raise _Closed()
            try:
                await self.ws.send_str(p.encode(message))
            except (ConnectionError, RuntimeError) as error:
                raise _Closed() from error

    # ------------------------------------------------------------------ hello

    def _on_hello(self, hello: p.Hello) -> None:
        channels: dict[str, ChannelRuntime] = {}
        for index, name in enumerate(hello.channels):
            channel = self.host.agent_channel(name)
            where = f"hello.channels[{index}]"
            if channel is None:
                raise p.ProtocolError(
                    "unknown_channel",
                    f"{where}: {name!r} is not a channel of this gateway",
                    field=where,
                )
            group = channel.config.agent_group
            if group != hello.group or channel.log is None:
                hint = f"its agent_group is {group!r}" if group else "set its agent_group"
                raise p.ProtocolError(
                    "wrong_group",
                    f"{where}: channel {name!r} is not served by agent group {hello.group!r} "
                    f"({hint})",
                    field=where,
                )
            channels[name] = channel
        self.hello = hello
        self._limiter.total_tokens = hello.concurrency
        self._members_done = anyio.Event()
        assert self._tg is not None
        self._tg.start_soon(self._join, hello, channels)

    async def _join(self, hello: p.Hello, channels: Mapping[str, ChannelRuntime]) -> None:
        settings = self.settings
        member_id = f"{hello.group}/{hello.name}@{self.host.gateway_id}"
        try:
            async with anyio.create_task_group() as members:
                for name, channel in channels.items():
                    assert channel.log is not None
                    member = AgentGroupMember(
                        channel.log,
                        member_id=member_id,
                        on_turn=self._turn_handler(name, channel),
                        settle=settings.settle,
                        heartbeat=settings.heartbeat,
                        expiry=settings.expiry,
                        lookback=settings.lookback,
                        max_concurrent=hello.concurrency,
                        drain_timeout=settings.drain_timeout,
                    )
                    self.members[name] = member
                    members.start_soon(member.run)
                for member in self.members.values():
                    await member.ready.wait()
                if self._closed:  # closed while they joined, after serve() made them leave
                    self._leave()
                    return
                await self._send_hello(hello)
        finally:
            self._members_done.set()

    async def _send_hello(self, hello: p.Hello) -> None:
        ids: dict[str, str] = {}
        since: dict[str, float] = {}
        for name, member in self.members.items():
            if member.current_id is not None and member.view is not None:
                ids[name] = member.current_id
                since[name] = member.view.members.get(member.current_id, 0.0)
        try:
            await self._send(
                p.ServerHello(
                    gateway=self.host.gateway_id,
                    members=ids,
                    since=since,
                    concurrency=hello.concurrency,
                    max_message_bytes=self.settings.max_message_bytes,
                    message_ids=True,
                )
            )
        except _Closed:
            return
        log.info("agent %s (%s) joined as %s", self.agent, self.remote, ids)
        self._hello_sent.set()

    async def _on_second_hello(self, message: p.Hello) -> None:
        raise p.ProtocolError(
            "second_hello",
            "hello: this connection already said hello; open a new connection to change its "
            "group or channels",
        )

    # ------------------------------------------------------------------ turns

    def _turn_handler(self, name: str, channel: ChannelRuntime) -> Any:
        async def on_turn(turn: Turn, history: Sequence[Turn | Frame]) -> None:
            await self._deliver(name, channel, turn, history)

        return on_turn

    async def _deliver(
        self, name: str, channel: ChannelRuntime, turn: Turn, history: Sequence[Turn | Frame]
    ) -> None:
        await self._hello_sent.wait()
        row: Obligation | None = None
        held: _Held | None = None
        try:
            row, held = await self._hold(name, channel, turn, history)
            # Sent in the gateway's tasks: this connection's end (its task group is cancelled
            # once its drain deadline passes) must not cut short a recorded reply's wait for its
            # turn at the channel, and leave it pending, claimed by no one, until a restart.
            if row is not None and not self.host.send_recorded_soon(channel, row):
                await channel.deliver(row)
        finally:
            if held is not None and held.streamed is not None:
                if not held.finished:  # answered otherwise, or never: its partials say so
                    channel.replies.interrupt(held.streamed)
                await channel.replies.close(held.streamed)

    async def _hold(
        self, name: str, channel: ChannelRuntime, turn: Turn, history: Sequence[Turn | Frame]
    ) -> tuple[Obligation | None, _Held | None]:
        """Send ``turn`` on the socket and record its answer: the row to send (if any) and the
        turn as it was held."""
        row: Obligation | None = None
        async with self._limiter:
            if self._closed or not self.members[name].still_owns(turn):  # it moves, or moved
                return None, None  # (this member leaves or expires; or it was expelled meanwhile)
            turn_id = f"{name}/{turn.seq}"
            held = self.held[turn_id] = _Held(turn=turn, channel=name)
            try:
                await self._send(turn_message(turn_id, name, turn, history))
                self._counts.turns_sent += 1
                row = await self._await_answer(turn_id, held, channel)
            except _Closed:
                return None, held
            finally:
                self.held.pop(turn_id, None)
        return row, held

    async def _await_answer(
        self, turn_id: str, held: _Held, channel: ChannelRuntime
    ) -> Obligation | None:
        """Wait for the agent's answer and record it; the row to send, if any."""
        member = self.members[held.channel]
        while True:
            if held.answer is None:
                if held.closed:
                    return None  # closed without an answer: the turn stays pending
                await held.event.wait()
                held.event = anyio.Event()
                continue
            # an answer that arrived before the socket closed is recorded all the same
            answer, held.answer = held.answer, None
            held.recording = True
            try:
                if isinstance(answer, p.Reply):
                    row = await channel.record_reply(held.turn, answer.text, member=member)
                elif isinstance(answer, p.Busy):
                    row = await channel.record_busy(held.turn, answer.notice, member=member)
                elif isinstance(answer, p.Decline):
                    await member.record_frame(held.turn, DECLINED)
                    row = None
                elif isinstance(answer, p.Streamed):  # a final
                    row = await self._record_final(held, answer, channel, member)
                else:
                    assert isinstance(answer, p.ClientError)
                    log.warning(
                        "agent %s failed on turn %s: %s (it stays unanswered)",
                        self.agent,
                        turn_id,
                        answer.message,
                    )
                    return None
            except NotAMember:
                # this member was expired (a stall): the turn moved; the agent must drop it
                await self._send_error(
                    p.ProtocolError(
                        "not_held",
                        f"{answer.type}: this connection's member left channel {held.channel}'s "
                        "group before the answer was recorded; the turn moved to another member",
                        turn=turn_id,
                    ),
                    re=answer.id,
                )
                return None
            except Exception as error:
                held.recording = False
                log.exception("recording the %s to turn %s failed", answer.type, turn_id)
                await self._send_error(
                    p.ProtocolError(
                        "unavailable",
                        f"{answer.type}: the gateway could not record it ({type(error).__name__});"
                        " send it again",
                        turn=turn_id,
                    ),
                    re=answer.id,
                )
                continue
            self._counts.answers_recorded += 1
            try:
                await self._send(
                    p.Ack(
                        recorded=answer.type,
                        turn=turn_id,
                        re=answer.id,
                        obligation=row.id if row is not None else None,
                    )
                )
            except _Closed:
                pass  # recorded all the same: the reply is sent; only the ack is lost
            return row

    async def _record_final(
        self,
        held: _Held,
        final: p.Streamed,
        channel: ChannelRuntime,
        member: AgentGroupMember,
    ) -> Obligation:
        assert channel.replies is not None and held.streamed is not None
        result = await channel.replies.finish(held.streamed, text=final.text or None)
        text = result.text if result.text.strip() else "(the agent returned an empty reply)"
        row = await channel.record_reply(held.turn, text, member=member, partials=result.partials)
        held.finished = True
        return row

    async def _on_stream(self, message: p.Streamed) -> None:
        """``stream``: a delta, shown at the channel's pace; ``final``: the end, recorded like
        a reply (a ``final`` with no stream before it is a plain reply)."""
        held = self._answerable(message)
        channel = self.host.agent_channel(held.channel)
        if channel is None or channel.replies is None:
            raise p.ProtocolError(
                "invalid", f"{message.type}: channel {held.channel!r} is gone", turn=message.turn
            )
        if held.streamed is None:
            if message.type == "final":  # a plain reply, whose text it must then carry
                if not message.text.strip():
                    raise p.ProtocolError(
                        "invalid",
                        "final.text: must not be empty when nothing was streamed before it",
                        field="text",
                        turn=message.turn,
                    )
                held.answer = p.Reply(turn=message.turn, text=message.text, id=message.id)
                held.wake()
                return
            streamed = obligation_id(channel.profile, held.turn.channel, held.turn.message_id, 0)
            await channel.replies.open(streamed, thread=held.turn.thread or channel.thread)
            # Only once it is open: a failed open is answered unavailable, and the turn must
            # stay answerable (its next delta opens it again, a final is a plain reply).
            held.streamed = streamed
        if message.type == "stream":
            await channel.replies.feed(held.streamed, message.text)
            return
        held.answer = message
        held.wake()

    def _answerable(self, message: p.ClientMessage) -> _Held:
        """The held turn ``message`` answers, if it may still be answered."""
        turn = getattr(message, "turn", "")
        held = self.held.get(turn)
        if held is None or held.closed:
            raise p.ProtocolError(
                "not_held",
                f"{message.type}: turn {turn!r} is not held by this connection (never "
                "sent to it, already answered, or moved to another member); nothing was recorded",
                turn=turn,
            )
        if held.recording or held.answer is not None:
            raise p.ProtocolError(
                "invalid",
                f"{message.type}: an answer to turn {turn!r} is already being recorded",
                turn=turn,
            )
        return held

    async def _on_answer(self, message: p.Reply | p.Busy | p.Decline | p.ClientError) -> None:
        held = self._answerable(message)
        held.answer = message
        held.wake()

    # ------------------------------------------------------------------ events

    async def _on_event(self, message: p.EventPost) -> None:
        try:
            events = parse_events_body(message.event)
            await self.host.accept_events(events)
        except ApiError as error:
            code = "shutting_down" if error.status == 503 else "rejected"
            raise p.ProtocolError(code, f"event: {error.message}", field=error.field) from None
        ignored = sum(1 for event in events if isinstance(event, UnknownEvent))
        ack = p.Ack(recorded="event", re=message.id, accepted=len(events), ignored=ignored)
        with contextlib.suppress(_Closed):  # accepted all the same; only the ack is lost
            await self._send(ack)
