"""The Python agent SDK: connect to a gateway's ``/v1/agents`` and answer the turns it hands out.

::

    async with connect("ws://127.0.0.1:8787/v1/agents", token=..., group="support",
                       channels=["ops"]) as session:
        async for turn in session:
            await turn.reply(await my_llm(turn.text, turn.history))

Each connection is one member of each channel's agent group (ADR 0037). When the connection
drops the session reconnects with jittered exponential backoff, as a *new* member (a new settle
delay); turns the old connection held and had not had acknowledged are the gateway's to move
(``turn.reply`` on one raises ``TurnLost``). Leaving the ``async with`` closes the socket with a
close frame: a graceful leave, so the turns still queued for this agent move at once.

After ``hello``, each message the session sends carries an ``id`` (when the gateway's ``hello``
says it takes them, ``message_ids``; an older gateway takes one on ``event`` only), and an answer
is matched to the message whose ``id`` it echoes as ``re``. An older gateway echoes none: its
answers are matched by turn, and an error whose text begins ``stream`` is taken for a refused
delta.

Runs on anyio: asyncio and trio alike. With ``concurrency`` above 1, answer turns in tasks::

    async with anyio.create_task_group() as tg:
        async for turn in session:
            tg.start_soon(answer, turn)

Exception hierarchy::

    AgentError            anything the SDK raises on purpose
    ├── Refused           the gateway refused the connection or the hello (not retried)
    ├── TurnLost          the connection that delivered a turn closed before its answer was acked
    └── Rejected          the gateway answered a message with an ``error`` (``code``, ``message``)
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import math
import random
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

import bridge_core.agent.protocol as p
from bridge_core.agent.ws import ConnectionClosed, HandshakeRefused, WebSocket, connect_websocket

__all__ = ["AgentError", "Refused", "Rejected", "Session", "Turn", "TurnLost", "connect"]

log = logging.getLogger("bridge_core.agent")

_M = TypeVar("_M", bound=p.ClientMessage)


class AgentError(Exception):
    """Base of the SDK's errors."""


class Refused(AgentError):
    """The gateway refused the connection (401/403: the token) or the hello (channel, group)."""


class TurnLost(AgentError):
    """The connection that delivered the turn closed before the answer was acknowledged; the
    gateway moves the turn to another member (or to this agent's next connection)."""


class Rejected(AgentError):
    """The gateway answered with an ``error`` message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


@dataclass(slots=True)
class _Waiter:
    """A message sent that waits for its ``ack`` or ``error``."""

    turn: str | None  # the turn it answers (None: an event), for a gateway that echoes no re
    event: anyio.Event = field(default_factory=anyio.Event)
    result: p.Ack | p.ServerError | None = None


class _Connection:
    """One WebSocket connection of a session (one member per channel)."""

    def __init__(self, ws: WebSocket, number: int) -> None:
        self.ws = ws
        self.number = number
        self.hello: p.ServerHello | None = None
        self.waiters: dict[str, _Waiter] = {}
        """By the id of the message each waits on (sent as ``id`` when the gateway takes it)."""
        self.closed = anyio.Event()

    @property
    def takes_ids(self) -> bool:
        """Whether the gateway takes an ``id`` on every message and echoes it as ``re``."""
        return self.hello is not None and self.hello.message_ids

    def waiter_for(self, answer: p.Ack | p.ServerError) -> _Waiter | None:
        """The waiter ``answer`` settles: the one of the message whose id it echoes as ``re``,
        exactly (none for an answer to a message nobody waits on: a refused delta, a refused
        ``fail``). Without ``re`` (a gateway older than message ids), the one waiting on its
        turn, unless its text says it refused a ``stream`` delta."""
        if answer.re is not None:
            return self.waiters.get(answer.re)
        if answer.turn is None:
            return None
        if isinstance(answer, p.ServerError) and _answers_a_delta(answer):
            return None  # a refused delta is not the reply's outcome
        return next((w for w in self.waiters.values() if w.turn == answer.turn), None)

    def settle_all(self) -> None:
        self.closed.set()
        for waiter in self.waiters.values():
            waiter.event.set()


@dataclass(frozen=True, slots=True, eq=False)
class Turn:
    """A person's turn this agent must answer: answer it once with ``reply``, ``busy``,
    ``decline`` or ``fail``, or stream the answer (``stream`` deltas, then ``final``)."""

    id: str
    channel: str
    conversation: str
    text: str
    author: str
    thread: str | None
    message_id: str
    seq: int
    inserted_at: float
    history: tuple[p.HistoryEntry, ...]
    _session: Session = field(repr=False)
    _connection: _Connection = field(repr=False)

    async def reply(self, text: str) -> p.Ack:
        """Send the answer; returns once the gateway recorded it durably (its ``ack``)."""
        return await self._session._answer(self, p.Reply(turn=self.id, text=text))

    async def busy(self, notice: str | None = None) -> p.Ack:
        """Tell the person the agent is busy (``notice``, or the gateway's default)."""
        return await self._session._answer(self, p.Busy(turn=self.id, notice=notice))

    async def decline(self, reason: str | None = None) -> p.Ack:
        """Settle the turn without answering the person."""
        return await self._session._answer(self, p.Decline(turn=self.id, reason=reason))

    async def stream(self, delta: str) -> None:
        """Append ``delta`` to a streamed reply (shown as it comes, at the channel's pace; no
        ack: the latest text wins; a refusal is logged). End it with ``final``."""
        await self._session._send_unanswered(
            self._connection, p.Streamed(type="stream", turn=self.id, text=delta)
        )

    async def final(self, text: str | None = None) -> p.Ack:
        """End a streamed reply (``text``: the whole final text, instead of the deltas');
        returns once the gateway recorded it durably, like ``reply``."""
        message = p.Streamed(type="final", turn=self.id, text=text or "")
        return await self._session._answer(self, message)

    async def fail(self, message: str) -> None:
        """Report a failure: nothing is recorded; the turn stays unanswered in the log."""
        await self._session._send_unanswered(
            self._connection, p.ClientError(turn=self.id, message=message)
        )


def _answers_a_delta(error: p.ServerError) -> bool:
    """Whether ``error``, from a gateway that echoes no ``re``, refused a ``stream`` delta
    (which waits for no answer): an error's message begins with the type of the message it
    answers (docs/agent-protocol.md). A guess from wording; ``re`` makes it unnecessary."""
    return error.message.startswith(("stream:", "stream."))


class Session:
    """A connected agent; iterate it for turns. Built by ``connect``."""

    def __init__(
        self,
        url: str,
        *,
        token: str | None,
        hello: p.Hello,
        reconnect: bool,
        backoff: tuple[float, float],
        rng: random.Random,
    ) -> None:
        self.url = url
        self.token = token
        self.hello_message = hello
        self.reconnect = reconnect
        self.backoff = backoff
        self.connections = 0
        """How many connections this session opened (each one a new member)."""
        self._rng = rng
        self._turns_in: MemoryObjectSendStream[Turn]
        self._turns: MemoryObjectReceiveStream[Turn]
        # the gateway bounds what is in flight (concurrency), so this buffer is bounded too
        self._turns_in, self._turns = anyio.create_memory_object_stream[Turn](math.inf)
        self._current: _Connection | None = None
        self._connected = anyio.Event()
        self._closing = False
        self._ended = False  # no connection comes any more (closed, gave up, or no reconnect)
        self._ids = itertools.count(1)
        self.failure: BaseException | None = None

    @property
    def hello(self) -> p.ServerHello | None:
        """The current connection's ``hello`` (member ids and ``since`` per channel); ``None``
        while reconnecting."""
        return self._current.hello if self._current is not None else None

    # ------------------------------------------------------------------ iteration

    def __aiter__(self) -> Session:
        return self

    async def __anext__(self) -> Turn:
        try:
            return await self._turns.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            if self.failure is not None:
                raise self.failure from None
            raise StopAsyncIteration from None

    # ------------------------------------------------------------------ sending

    async def _send(self, connection: _Connection, message: p.ClientMessage) -> None:
        try:
            await connection.ws.send_text(p.encode(message))
        except ConnectionClosed as closed:
            raise TurnLost(f"the connection closed ({closed.code}) before sending") from None

    def _identified(self, connection: _Connection, message: _M) -> tuple[_M, str]:
        """``message`` with a new ``id`` (unless the gateway would refuse the field: an older
        one takes it on ``event`` only), and that id, which keys its waiter either way."""
        key = f"{message.type}-{next(self._ids)}"
        if connection.takes_ids or isinstance(message, p.EventPost):
            message = dataclasses.replace(message, id=key)
        return message, key

    async def _send_unanswered(self, connection: _Connection, message: p.ClientMessage) -> None:
        """Send a message that gets no ``ack``; with an ``id``, so that an error refusing it is
        known for its own (and logged) rather than taken for the outcome of another."""
        await self._send(connection, self._identified(connection, message)[0])

    async def _request(
        self, connection: _Connection, message: p.ClientMessage, *, turn: str | None
    ) -> p.Ack:
        message, key = self._identified(connection, message)
        waiter = connection.waiters[key] = _Waiter(turn=turn)
        try:
            await self._send(connection, message)
            await waiter.event.wait()
        finally:
            connection.waiters.pop(key, None)
        result = waiter.result
        if isinstance(result, p.Ack):
            return result
        if isinstance(result, p.ServerError):
            raise Rejected(result.code, result.message)
        what = f"the {message.type} to turn {turn}" if turn is not None else key
        raise TurnLost(f"the connection closed before the gateway acknowledged {what}")

    async def _answer(self, turn: Turn, message: p.ClientMessage) -> p.Ack:
        for attempt in range(5):
            try:  # each attempt a message of its own, with its own id
                return await self._request(turn._connection, message, turn=turn.id)
            except Rejected as error:
                if error.code != "unavailable" or attempt == 4:
                    raise
                await anyio.sleep(0.1 * 2**attempt)  # the gateway's store blinked: send again
        raise AssertionError("unreachable")

    async def send_events(self, events: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> p.Ack:
        """Fleet events (the JSON of ``POST /v1/events``) on this socket; returns the ack."""
        while True:
            if self._closing or self.failure is not None or self._ended:
                raise AgentError("the session is closed; connect again to send events")
            await self._connected.wait()  # a connection said hello (or the session ended)
            connection = self._current
            if connection is not None:  # else it dropped meanwhile: wait for the next one
                break
        body = dict(events) if isinstance(events, Mapping) else [dict(e) for e in events]
        return await self._request(connection, p.EventPost(event=body), turn=None)

    # ------------------------------------------------------------------ the connection loop

    async def _connect(self) -> _Connection:
        """A new connection that said hello, retrying with backoff (when reconnecting)."""
        attempt = 0
        while True:
            try:
                return await self._open()
            except (OSError, ConnectionClosed, TimeoutError, HandshakeRefused) as error:
                if isinstance(error, HandshakeRefused) and error.status in (400, 401, 403, 404):
                    raise Refused(str(error)) from None
                if not self.reconnect:
                    raise
                delay = self._delay(attempt)
                attempt += 1
                log.warning(
                    "agent: cannot connect to %s (%r); retrying in %.2f s", self.url, error, delay
                )
                await anyio.sleep(delay)

    async def _run(self, connection: _Connection) -> None:
        """Read ``connection``; after a drop, reconnect (a new member) until closed."""
        try:
            while True:
                await self._read(connection)
                if self._closing or not self.reconnect:
                    return
                delay = self._delay(0)
                log.warning(
                    "agent: connection %d closed; reconnecting in %.2f s as a new member",
                    connection.number,
                    delay,
                )
                await anyio.sleep(delay)
                connection = await self._connect()
        except AgentError as error:
            self.failure = error
            log.error("agent: giving up: %s", error)
        finally:
            self._turns_in.close()
            self._ended = True
            self._connected.set()  # events waiting for a connection: there will be none

    def _delay(self, attempt: int) -> float:
        """Equal jitter: uniform over the upper half of ``min(cap, base * 2**attempt)``, so
        agents dropped together do not reconnect together."""
        base, cap = self.backoff
        high = min(cap, base * 2 ** min(attempt, 16))
        return self._rng.uniform(high / 2, high)

    async def _open(self) -> _Connection:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        ws = await connect_websocket(self.url, headers=headers)
        self.connections += 1
        connection = _Connection(ws, self.connections)
        try:
            await ws.send_text(p.encode(self.hello_message))
            with anyio.fail_after(60.0):
                first = p.parse_server_message(await ws.receive())
        except BaseException:
            await ws.abort()
            raise
        if isinstance(first, p.ServerError):
            await ws.close()
            raise Refused(f"the gateway refused the hello: {first.code}: {first.message}")
        if not isinstance(first, p.ServerHello):
            await ws.close()
            raise Refused(f"the gateway answered hello with {first.type}")
        connection.hello = first
        self._current = connection
        self._connected.set()
        return connection

    async def _read(self, connection: _Connection) -> None:
        try:
            while True:
                try:
                    message = p.parse_server_message(await connection.ws.receive())
                except p.ProtocolError as error:
                    log.warning("agent: ignoring a gateway message it cannot read: %s", error)
                    continue
                if isinstance(message, p.TurnMessage):
                    await self._turns_in.send(self._turn(message, connection))
                elif isinstance(message, p.Ack | p.ServerError):
                    waiter = connection.waiter_for(message)
                    if waiter is not None and waiter.result is None:  # its first answer only
                        waiter.result = message
                        waiter.event.set()
                    elif isinstance(message, p.ServerError):
                        log.warning(
                            "agent: gateway error %s%s: %s",
                            message.code,
                            f" (re {message.re})" if message.re is not None else "",
                            message.message,
                        )
        except ConnectionClosed as closed:
            log.info(
                "agent: connection %d closed (%d %s)", connection.number, closed.code, closed.reason
            )
        finally:
            if not self._closing:
                self._connected = anyio.Event()
                if self._current is connection:
                    self._current = None  # no hello until the next connection said it
            connection.settle_all()
            with anyio.CancelScope(shield=True):
                await connection.ws.abort()  # the stream, whatever closed it

    def _turn(self, message: p.TurnMessage, connection: _Connection) -> Turn:
        return Turn(
            id=message.turn,
            channel=message.channel,
            conversation=message.conversation,
            text=message.text,
            author=message.author,
            thread=message.thread,
            message_id=message.message_id,
            seq=message.seq,
            inserted_at=message.inserted_at,
            history=message.history,
            _session=self,
            _connection=connection,
        )

    async def aclose(self) -> None:
        """Close the socket with a close frame (a graceful leave of every group)."""
        self._closing = True
        if self._current is not None:
            await self._current.ws.close(p.CLOSE_NORMAL, "the agent is leaving")


@asynccontextmanager
async def connect(
    url: str,
    *,
    group: str,
    channels: Sequence[str],
    token: str | None = None,
    name: str = "agent",
    concurrency: int = 1,
    reconnect: bool = True,
    backoff: tuple[float, float] = (0.2, 10.0),
    rng: random.Random | None = None,
) -> AsyncIterator[Session]:
    """A session connected to the gateway at ``url`` (``ws://host:port/v1/agents``), joined to
    ``group`` in ``channels``; it has said hello when the block starts."""
    hello = p.Hello(group=group, channels=tuple(channels), name=name, concurrency=concurrency)
    session = Session(
        url,
        token=token,
        hello=hello,
        reconnect=reconnect,
        backoff=backoff,
        rng=rng or random.Random(),
    )
    tg: TaskGroup
    try:
        first = await session._connect()
        async with anyio.create_task_group() as tg:
            tg.start_soon(session._run, first)
            try:
                yield session
            finally:
                with anyio.CancelScope(shield=True):
                    await session.aclose()
                tg.cancel_scope.cancel()
    finally:
        session._turns.close()
        session._turns_in.close()
