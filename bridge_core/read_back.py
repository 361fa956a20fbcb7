"""Where a provider's inbound left off, per channel, for reading back what it missed.

A platform that replays nothing to a new connection (Discord after an IDENTIFY, Slack past its
resends) loses what people wrote while the gateway was away, unless the provider reads each
channel back from the newest message the core accepted. ``ChannelPositions`` keeps those
positions for one profile in the core's ``KeyValueStore``: one bounded value, least recently
active channels dropped first, a value it cannot read logged and replaced (inbound must start),
and writes coalesced by ``flush`` (what a crash loses is only read again, and the core's dedup
drops it). The provider supplies the value's format (``encode``, ``decode``; ``JsonRows`` is
the usual one: a version and one JSON list a channel) and decides when a position moves (``put``
only after the core accepted the message).
"""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import anyio

from bridge_core.provider import KeyValueStore

__all__ = ["ChannelPositions", "JsonRows"]

K = TypeVar("K")
V = TypeVar("V")


@dataclass(frozen=True)
class JsonRows(Generic[K, V]):
    """A stored value of positions as JSON, ``{"v": version, "channels": [row, ...]}``, oldest
    activity first: ``row(channel, position)`` makes a channel's list, ``parse(row)`` reads one
    back, or ``None`` when it is not a row this format wrote (then the whole value is not)."""

    version: int
    row: Callable[[K, V], list[Any]]
    parse: Callable[[list[Any]], tuple[K, V] | None]

    def encode(self, channels: OrderedDict[K, V]) -> bytes:
        rows = [self.row(channel, position) for channel, position in channels.items()]
        return json.dumps({"v": self.version, "channels": rows}, separators=(",", ":")).encode()

    def decode(self, raw: bytes, limit: int) -> OrderedDict[K, V] | None:
        """The channels in ``raw`` (the ``limit`` most recently active), or ``None``."""
        try:
            data = json.loads(raw)
        except (ValueError, UnicodeDecodeError, RecursionError):
            return None
        if not isinstance(data, dict) or data.get("v") != self.version:
            return None
        rows = data.get("channels")
        if not isinstance(rows, list):
            return None
        channels: OrderedDict[K, V] = OrderedDict()
        for row in rows:
            parsed = self.parse(row) if isinstance(row, list) else None
            if parsed is None:
                return None
            channel, position = parsed
            channels.pop(channel, None)
            channels[channel] = position
        while len(channels) > limit:
            channels.popitem(last=False)
        return channels


class ChannelPositions(Generic[K, V]):
    """Each channel's position, oldest activity first, in memory; ``flush`` writes them to
    ``kv`` under ``namespace``/``profile`` when they changed. ``decode(raw, limit)`` returns the
    channels, or ``None`` for a value it did not write."""

    def __init__(
        self,
        kv: KeyValueStore,
        *,
        namespace: str,
        profile: str,
        limit: int,
        encode: Callable[[OrderedDict[K, V]], bytes],
        decode: Callable[[bytes, int], OrderedDict[K, V] | None],
        log: logging.Logger,
    ) -> None:
        self._kv = kv
        self._namespace = namespace
        self._profile = profile
        self._limit = limit
        self._encode = encode
        self._decode = decode
        self._log = log
        self._channels: OrderedDict[K, V] = OrderedDict()
        self._dirty = False
        self._writing = anyio.Lock()  # an older value must never land after a newer one

    async def load(self) -> bool:
        """Read the stored positions; False when the store could not be read (logged: this run
        goes without a read-back and writes nothing, so the stored value is there for the next).
        A value ``decode`` cannot read is logged and replaced by an empty one, so inbound starts
        (without a read-back) rather than failing for ever."""
        try:
            raw = await self._kv.get(self._namespace, self._profile)
        except Exception as exc:
            self._log.warning(
                "profile %s: reading the backfill positions failed (%r); messages sent while "
                "inbound was down are not read back this time",
                self._profile,
                exc,
            )
            return False
        if raw is None:
            return True
        channels = self._decode(raw, self._limit)
        if channels is None:
            self._log.warning(
                "profile %s: the stored backfill positions (%d bytes) are not readable; "
                "starting without them, so messages sent while inbound was down are not read "
                "back this time",
                self._profile,
                len(raw),
            )
            self._dirty = True  # the next flush replaces the bad value
            return True
        self._channels = channels
        return True

    def newest_first(self) -> list[tuple[K, V]]:
        """The remembered channels, most recently active first (their gaps are read first)."""
        return list(reversed(self._channels.items()))

    def get(self, channel: K) -> V | None:
        return self._channels.get(channel)

    def put(self, channel: K, position: V) -> None:
        """``channel`` is now at ``position`` and the most recently active; past ``limit`` the
        least recently active is forgotten."""
        self._channels.pop(channel, None)
        self._channels[channel] = position
        while len(self._channels) > self._limit:
            self._channels.popitem(last=False)
        self._dirty = True

    def forget(self, channel: K) -> None:
        if self._channels.pop(channel, None) is not None:
            self._dirty = True

    async def flush(self) -> None:
        """Write the positions if they changed since the last write."""
        async with self._writing:
            if not self._dirty:
                return
            self._dirty = False
            try:
                await self._kv.put(self._namespace, self._profile, self._encode(self._channels))
            except BaseException:
                self._dirty = True
                raise

    async def flush_or_log(self) -> None:
        """``flush``, a failed write logged rather than raised: the positions only move forward
        in memory, and the next write carries them."""
        try:
            await self.flush()
        except Exception as exc:
            self._log.warning(
                "profile %s: writing the backfill positions failed (%r); retrying",
                self._profile,
                exc,
            )
