"""Inbound over Slack's Socket Mode: events on a websocket instead of signed HTTP requests.

``apps.connections.open`` (with the app-level token) gives a websocket URL; Slack sends
``hello``, then ``events_api`` envelopes, each acknowledged by sending back its
``envelope_id`` on the socket it came on. The acknowledgement goes only after the core's sink
took the message (through the provider's ``take``, which holds it instead while its channel's
gap is read back: ``bridge_slack.receiver``), so a failure there leaves the envelope
unacknowledged and Slack redelivers it (the dedup absorbs the repeat).

Slack rotates connections: a ``disconnect`` message (reason ``warning`` about 10 s before the
close, ``refresh_requested``, or one this module does not know) says the socket will close
soon. The next connection is opened then, up to its ``hello``, while the old socket is still
read and its envelopes acknowledged; once the new one has said hello the old one is closed, so
at most two are open. Envelopes arriving on either socket meanwhile all go to the sink. If the
old socket closes first, the new one simply takes over; if the new one cannot be opened, the old
one is closed and the failure raised as it would be on the first connection.

Raised for the core's reconnect watcher, which backs off before rebuilding: ``ConnectionLost``
when a socket ends without a ``disconnect``, when no ``hello`` comes within ``hello_timeout``,
and for the reasons that are not a rotation: ``too_many_websockets`` (the app holds more
connections than Slack allows, 10: reconnecting at once would only add one more) and
``link_disabled`` (Socket Mode was switched off for the app). A refused app token raises
``Unreachable``. ``socket_connection`` has the reading of one socket.

slack-sdk's own ``SocketModeClient`` is not used: it reconnects forever inside background
tasks, so the core would never learn the connection was lost, and it logs whole payloads.
"""

from __future__ import annotations

import itertools
import logging
from typing import TYPE_CHECKING, Any, NoReturn

import aiohttp
import anyio
import anyio.lowlevel
from anyio.abc import TaskGroup

from bridge_core import ConnectionLost, InboundSink, ProviderError, TransportError
from bridge_slack.events import made_valid, to_inbound
from bridge_slack.socket_connection import SocketConnection

if TYPE_CHECKING:
    from bridge_slack.provider import SlackProvider

__all__ = ["NOT_ROTATIONS", "SlackSocketMode"]

logger = logging.getLogger("bridge_slack.socket_mode")

# disconnect reasons after which a new connection cannot help at once
NOT_ROTATIONS = {
    "too_many_websockets": "the app holds more Socket Mode connections than Slack allows (10)",
    "link_disabled": "Socket Mode was switched off in the app's settings",
}


class SlackSocketMode:
    """One provider's Socket Mode session; ``run()`` until cancelled or the socket is lost."""

    def __init__(
        self,
        provider: SlackProvider,
        sink: InboundSink,
        *,
        profile: str,
        heartbeat: float,
        hello_timeout: float,
        connected: anyio.Event | None = None,
    ) -> None:
        self._provider = provider
        self._sink = sink
        self._profile = profile
        self._heartbeat = heartbeat  # seconds between pings (settings.socket_ping_interval)
        self._hello_timeout = hello_timeout  # seconds a new socket has to say hello
        self._numbers = itertools.count(1)
        self._connected = connected  # set at the first hello (the read-back waits for it)

    def __repr__(self) -> str:
        return f"SlackSocketMode(profile={self._profile!r})"

    async def run(self) -> None:
        await self._provider.learn_identity()
        ended: list[ProviderError] = []
        async with anyio.create_task_group() as group:
            try:
                await self._serve(group)
            except ProviderError as exc:  # raised below, on its own rather than in a group
                ended.append(exc)
                group.cancel_scope.cancel()
        await anyio.lowlevel.checkpoint_if_cancelled()  # cancelled, not lost, if both
        raise ended[0]

    async def _serve(self, group: TaskGroup) -> NoReturn:
        """Connect, then follow Slack's rotations until a connection is lost; sockets are read
        in ``group``, and every one opened here is closed before this raises."""
        current = await self._connect(group)
        if self._connected is not None:
            self._connected.set()
        try:
            while True:
                await current.changed.wait()
                self._raise_unless_rotating(current)
                logger.info(
                    "Slack profile %s: Slack is rotating Socket Mode connection %d (%s)",
                    self._profile,
                    current.number,
                    current.reason,
                )
                try:
                    following = await self._connect(group)
                finally:
                    await current.close()
                current = following
        finally:
            await current.close()

    def _raise_unless_rotating(self, connection: SocketConnection) -> None:
        if connection.reason is None:
            raise ConnectionLost(
                f"Slack Socket Mode connection of profile {self._profile!r} closed unexpectedly"
            )
        if connection.reason in NOT_ROTATIONS:
            raise ConnectionLost(
                f"Slack ended the Socket Mode connection of profile {self._profile!r} with "
                f"{connection.reason}: {NOT_ROTATIONS[connection.reason]}"
            )

    async def _connect(self, group: TaskGroup) -> SocketConnection:
        """A new connection, read in ``group``, that has said hello; nothing left open if not."""
        try:
            url = await self._provider.open_socket_url()
        except ConnectionLost:
            raise
        except TransportError as exc:
            raise ConnectionLost(f"Slack Socket Mode could not connect: {exc}") from None
        try:
            socket = await self._provider.session().ws_connect(url, heartbeat=self._heartbeat)
        except (aiohttp.ClientError, TimeoutError) as exc:
            # aiohttp's message names the URL, whose query is this connection's ticket.
            status = getattr(exc, "status", None)
            said = f" (HTTP {status})" if isinstance(status, int) else ""
            raise ConnectionLost(
                f"Slack Socket Mode could not open its websocket: {type(exc).__name__}{said}"
            ) from None
        connection = SocketConnection(socket, profile=self._profile, number=next(self._numbers))
        try:
            group.start_soon(connection.read, self._handle)
            with anyio.move_on_after(self._hello_timeout):
                await connection.settled.wait()
            if not connection.greeted:
                if connection.reason in NOT_ROTATIONS:
                    self._raise_unless_rotating(connection)
                said = f"disconnect ({connection.reason})" if connection.reason else "nothing"
                raise ConnectionLost(
                    f"Slack Socket Mode connection of profile {self._profile!r} had no hello "
                    f"within {self._hello_timeout:g} s: it "
                    + ("closed" if connection.ended else f"said {said}")
                )
        except BaseException:
            await connection.close()
            raise
        return connection

    async def _handle(self, connection: SocketConnection, data: dict[str, Any]) -> None:
        envelope_id = data.get("envelope_id")
        if not isinstance(envelope_id, str):
            return  # anything that needs no acknowledgement
        kind = data.get("type")
        if kind == "events_api" and isinstance(data.get("payload"), dict):
            retries = data.get("retry_attempt")
            message = to_inbound(
                made_valid(data["payload"], profile=self._profile),
                profile=self._profile,
                own_ids=self._provider.own_ids(),
                retry_num=retries if isinstance(retries, int) else 0,
            )
            if message is not None:
                try:
                    await self._provider.take(message, self._sink)
                except Exception:
                    # Unacknowledged, Slack redelivers it; the dedup absorbs the repeat.
                    logger.exception(
                        "Slack profile %s: the core failed to take message %s; Slack will "
                        "redeliver it",
                        self._profile,
                        message.message_id,
                    )
                    return
        await connection.acknowledge(envelope_id)
