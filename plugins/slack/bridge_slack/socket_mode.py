"""Inbound over Slack's Socket Mode: events on a websocket instead of signed HTTP requests.

``apps.connections.open`` (with the app-level token) gives a websocket URL; Slack sends
``hello``, then ``events_api`` envelopes, each acknowledged by sending back its
``envelope_id``. The acknowledgement goes only after the core's sink took the message, so a
failure there leaves the envelope unacknowledged and Slack redelivers it (the dedup absorbs
the repeat). A ``disconnect`` message is Slack's planned rotation: a new connection is opened
in place. Any other end of the socket (a drop, a missed heartbeat) raises ``ConnectionLost``
for the core's reconnect watcher; a refused app token raises ``Unreachable``.

slack-sdk's own ``SocketModeClient`` is not used: it reconnects forever inside background
tasks, so the core would never learn the connection was lost, and it logs whole payloads.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

import aiohttp

from bridge_core import ConnectionLost, InboundSink, TransportError
from bridge_slack.events import made_valid, to_inbound

if TYPE_CHECKING:
    from bridge_slack.provider import SlackProvider

__all__ = ["SlackSocketMode"]

logger = logging.getLogger("bridge_slack.socket_mode")


class SlackSocketMode:
    """One provider's Socket Mode session; ``run()`` until cancelled or the socket is lost."""

    def __init__(
        self, provider: SlackProvider, sink: InboundSink, *, profile: str, heartbeat: float
    ) -> None:
        self._provider = provider
        self._sink = sink
        self._profile = profile
        self._heartbeat = heartbeat  # seconds between pings (settings.socket_ping_interval)

    def __repr__(self) -> str:
        return f"SlackSocketMode(profile={self._profile!r})"

    async def run(self) -> None:
        await self._provider.learn_identity()
        while True:
            try:
                url = await self._provider.open_socket_url()
            except ConnectionLost:
                raise
            except TransportError as exc:
                raise ConnectionLost(f"Slack Socket Mode could not connect: {exc}") from None
            if not await self._serve(url):
                raise ConnectionLost(
                    f"Slack Socket Mode connection of profile {self._profile!r} closed unexpectedly"
                )
            logger.info("Slack profile %s: Socket Mode rotated by Slack", self._profile)

    async def _serve(self, url: str) -> bool:
        """Serve one websocket; True when Slack asked us to move to a new one."""
        try:
            session = self._provider.session()
            async with session.ws_connect(url, heartbeat=self._heartbeat) as socket:
                async for frame in socket:
                    if frame.type is aiohttp.WSMsgType.TEXT:
                        if await self._handle(socket, frame.data):
                            return True
                    elif frame.type is aiohttp.WSMsgType.ERROR:
                        break
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise ConnectionLost(f"Slack Socket Mode: {type(exc).__name__}: {exc}") from None
        return False

    async def _handle(self, socket: aiohttp.ClientWebSocketResponse, raw: str) -> bool:
        try:
            data: Any = json.loads(raw)
        except (ValueError, RecursionError):
            logger.warning("Slack profile %s: a Socket Mode frame was not JSON", self._profile)
            return False
        if not isinstance(data, dict):
            return False
        kind = data.get("type")
        if kind == "disconnect":
            return True
        envelope_id = data.get("envelope_id")
        if not isinstance(envelope_id, str):
            return False  # hello, and anything that needs no acknowledgement
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
                    await self._sink(message)
                except Exception:
                    # Unacknowledged, Slack redelivers it; the dedup absorbs the repeat.
                    logger.exception(
                        "Slack profile %s: the core failed to take message %s; Slack will "
                        "redeliver it",
                        self._profile,
                        message.message_id,
                    )
                    return False
        await socket.send_json({"envelope_id": envelope_id})
        return False
