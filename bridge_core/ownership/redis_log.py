"""The distributed conversation log: one Redis stream per channel (``redis.asyncio``).

Keys of channel ``C`` (all in one cluster slot through the ``{C}`` hash tag)::

    <prefix>:{C}:log        the stream: turns, frames, joins, leaves (server-assigned ids)
    <prefix>:{C}:members    hash member -> since (ms), the membership at the stream's end
    <prefix>:{C}:hb         sorted set member -> last heartbeat (server TIME, ms)
    <prefix>:{C}:stats      hash admitted / answered
    <prefix>:{C}:seen:<id>  an admitted platform message id (PX seen_ttl)

Every write that must be atomic is one Lua script (ADR 0032): admission checks and sets the
dedup key and appends the turn (``redis_batch.WRITE_MANY``, with the frames); a join appends
its record, adds the member and returns the membership before it; a leave and the reaper
remove the member and append the leave only if the member was still present, so each
departure is recorded exactly once. ``since`` is the join entry's id time plus the settle
delay, computed by readers from the entry (ADR 0031).

A record's ``seq`` is its stream id ``<ms>-<n>`` packed as ``ms << 20 | n`` (order-preserving)
and its ``inserted_at`` is ``ms / 1000``: Redis keeps ids increasing even if its clock steps back.
Each member reads with plain ``XREAD`` from its own cursor (every member sees every record),
on a connection the handle keeps for its reads, past the client's per-command layers (ADR 0191).

Admissions and frames made at the same time by different tasks of one process go to the
server in one script call (``redis_batch.WriteBatcher``, ADR 0130): one round trip and one
command for many writes, run in the order they were made.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import anyio
import redis.asyncio as aioredis
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from bridge_core.conversation import Frame, Join, Leave, LeaveReason, LogRecord, Turn
from bridge_core.conversation import conversation_id as make_conversation_id
from bridge_core.ownership.backlog import rewind_members
from bridge_core.ownership.log import (
    DEFAULT_SEEN_TTL,
    Backlog,
    JoinResult,
    LogStatistics,
    LogUnavailable,
)
from bridge_core.ownership.redis_batch import ADMIT, FRAME, WriteBatcher
from bridge_core.provider import InboundMessage

__all__ = ["RedisConversationLog", "seq_of", "stream_id_of"]

_SEQ_BITS = 20
_HISTORY_SCAN = 2000


def _since(seq: int, settle_ms: int) -> float:
    """A joiner's ``since``, computed as the members hash and a leave's ``si`` hold it (the
    join's milliseconds plus the settle, then seconds): ``at + settle / 1000`` is one ulp off
    for about a fifth of settles, and members that read it one way and the other assigned a
    turn in that millisecond to different owners."""
    return ((seq >> _SEQ_BITS) + settle_ms) / 1000.0


_JOIN = """
local before = redis.call('HGETALL', KEYS[2])
local id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[3], '*',
                      'k', 'j', 'mb', ARGV[1], 'st', ARGV[2])
local ms = tonumber(string.match(id, '^(%d+)'))
redis.call('HSET', KEYS[2], ARGV[1], tostring(ms + tonumber(ARGV[2])))
local t = redis.call('TIME')
redis.call('ZADD', KEYS[3], tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), ARGV[1])
return {id, before}
"""

_LEAVE = """
local since = redis.call('HGET', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
if not since then return false end
redis.call('HDEL', KEYS[2], ARGV[1])
return redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[2], '*',
                  'k', 'l', 'mb', ARGV[1], 'r', 'graceful', 'si', since)
"""

_HEARTBEAT = """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
local t = redis.call('TIME')
redis.call('ZADD', KEYS[2], tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), ARGV[1])
return 1
"""

_REAP = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local dead = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', '(' .. tostring(now - tonumber(ARGV[1])))
local out = {}
for _, m in ipairs(dead) do
  redis.call('ZREM', KEYS[3], m)
  local since = redis.call('HGET', KEYS[2], m)
  if since then
    redis.call('HDEL', KEYS[2], m)
    local id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[2], '*',
                          'k', 'l', 'mb', m, 'r', 'expired', 'si', since)
    table.insert(out, id)
  end
end
return out
"""


def seq_of(stream_id: str) -> int:
    """The integer ``seq`` of a stream id ``<ms>-<n>`` (order-preserving)."""
    ms, _, n = stream_id.partition("-")
    return (int(ms) << _SEQ_BITS) | int(n or 0)


def stream_id_of(seq: int) -> str:
    return f"{seq >> _SEQ_BITS}-{seq & ((1 << _SEQ_BITS) - 1)}"


class RedisConversationLog:
    """A ``ConversationLog`` in Redis. Open with ``await RedisConversationLog.connect``."""

    def __init__(
        self,
        client: aioredis.Redis,
        *,
        channel: str,
        seen_ttl: float,
        key_prefix: str,
        max_len: int,
    ) -> None:
        self.channel = channel
        self.client = client
        self.seen_ttl_ms = max(1, int(seen_ttl * 1000))
        self.max_len = max_len
        tag = channel.replace("{", "(").replace("}", ")")
        base = f"{key_prefix}:{{{tag}}}"
        self.stream_key = f"{base}:log"
        self.members_key = f"{base}:members"
        self.heartbeat_key = f"{base}:hb"
        self.stats_key = f"{base}:stats"
        self.seen_prefix = f"{base}:seen:"
        # the members' reads' own connection (``_xread``), and whether a read holds it
        self._read_conn: AbstractConnection | None = None
        self._read_busy = False
        self._join = client.register_script(_JOIN)
        self._leave = client.register_script(_LEAVE)
        self._heartbeat = client.register_script(_HEARTBEAT)
        self._reap = client.register_script(_REAP)
        self._batch = WriteBatcher(
            client,
            stream_key=self.stream_key,
            stats_key=self.stats_key,
            seen_ttl_ms=self.seen_ttl_ms,
            max_len=max_len,
            unavailable=self._lost,
        )

    @classmethod
    async def connect(
        cls,
        url: str,
        *,
        channel: str,
        seen_ttl: float = DEFAULT_SEEN_TTL,
        key_prefix: str = "bridge",
        max_len: int = 1_000_000,
    ) -> RedisConversationLog:
        client = aioredis.Redis.from_url(url, decode_responses=True)
        try:
            await client.ping()
        except (RedisConnectionError, RedisTimeoutError, OSError) as error:
            await client.aclose()
            raise LogUnavailable(
                f"cannot reach Redis at {url} for the conversation log of {channel!r}: {error}"
            ) from error
        return cls(
            client, channel=channel, seen_ttl=seen_ttl, key_prefix=key_prefix, max_len=max_len
        )

    def _lost(self, error: Exception) -> LogUnavailable:
        return LogUnavailable(f"Redis conversation log {self.stream_key}: {error}")

    async def _call(self, coro: Any) -> Any:
        try:
            return await coro
        except (RedisConnectionError, RedisTimeoutError, OSError) as error:
            raise LogUnavailable(f"Redis conversation log {self.stream_key}: {error}") from error

    # ------------------------------------------------------------------ decoding

    def _decode(self, entry_id: str, f: Mapping[str, str]) -> LogRecord:
        seq = seq_of(entry_id)
        at = (seq >> _SEQ_BITS) / 1000.0
        kind = f.get("k")
        if kind == "t":
            return Turn(self.channel, f["c"], seq, at, f["m"], f["a"], f["x"], f.get("th"))
        if kind == "f":
            return Frame(self.channel, f["c"], seq, at, int(f["s"]), f["mb"], f["o"])
        if kind == "j":
            return Join(self.channel, seq, at, f["mb"], _since(seq, int(f["st"])))
        return Leave(self.channel, seq, at, f["mb"], LeaveReason(f["r"]))

    # ------------------------------------------------------------------ writes

    async def admit(self, message: InboundMessage) -> Turn | None:
        if message.author_is_bot:
            return None
        conversation = make_conversation_id(
            message.channel, thread=message.thread, author=message.author
        )
        values = (ADMIT, conversation, message.message_id, message.author, message.text)
        entry_id = await self._batch.write(
            self.seen_prefix + message.message_id, (*values, message.thread or "")
        )
        if entry_id is None:
            return None
        seq = seq_of(entry_id)
        return Turn(
            self.channel,
            conversation,
            seq,
            (seq >> _SEQ_BITS) / 1000.0,
            message.message_id,
            message.author,
            message.text,
            message.thread,
        )

    async def record_frame(self, turn: Turn, member: str, obligation: str) -> Frame:
        entry_id = await self._batch.write(
            None, (FRAME, turn.conversation, str(turn.seq), member, obligation)
        )
        seq = seq_of(entry_id)
        at = (seq >> _SEQ_BITS) / 1000.0
        return Frame(self.channel, turn.conversation, seq, at, turn.seq, member, obligation)

    async def join(self, member: str, *, settle: float) -> JoinResult:
        settle_ms = max(0, round(settle * 1000))
        entry_id, flat = await self._call(
            self._join(
                keys=[self.stream_key, self.members_key, self.heartbeat_key],
                args=[member, settle_ms, self.max_len],
            )
        )
        before = {flat[i]: int(flat[i + 1]) / 1000.0 for i in range(0, len(flat), 2)}
        seq = seq_of(entry_id)
        at = (seq >> _SEQ_BITS) / 1000.0
        return JoinResult(Join(self.channel, seq, at, member, _since(seq, settle_ms)), before)

    async def leave(self, member: str) -> Leave | None:
        entry_id = await self._call(
            self._leave(
                keys=[self.stream_key, self.members_key, self.heartbeat_key],
                args=[member, self.max_len],
            )
        )
        if entry_id is None:
            return None
        seq = seq_of(entry_id)
        at = (seq >> _SEQ_BITS) / 1000.0
        return Leave(self.channel, seq, at, member, LeaveReason.GRACEFUL)

    async def heartbeat(self, member: str) -> bool:
        alive = await self._call(
            self._heartbeat(keys=[self.members_key, self.heartbeat_key], args=[member])
        )
        return bool(alive)

    async def reap(self, *, expiry: float) -> list[Leave]:
        ids = await self._call(
            self._reap(
                keys=[self.stream_key, self.members_key, self.heartbeat_key],
                args=[max(1, int(expiry * 1000)), self.max_len],
            )
        )
        out: list[Leave] = []
        for entry_id in ids or ():
            rows = await self._call(self.client.xrange(self.stream_key, entry_id, entry_id))
            for got_id, fields in rows:
                record = self._decode(got_id, fields)
                if isinstance(record, Leave):
                    out.append(record)
        return out

    # ------------------------------------------------------------------ reads

    async def read(
        self, *, after_seq: int, limit: int = 1000, wait: float = 0.0
    ) -> list[LogRecord]:
        # stay well inside redis-py's socket timeout (5 s by default) when blocking
        block = max(1, int(min(wait, 2.0) * 1000)) if wait > 0 else None
        after = stream_id_of(after_seq)
        if self._read_busy:  # another read holds the handle's connection: this one the pool's
            reply = await self._call(
                self.client.xread({self.stream_key: after}, count=limit, block=block)
            )
            entries = [entry for _key, found in reply or () for entry in found]
        else:
            entries = await self._call(self._xread(after, limit, block))
        return [self._decode(entry_id, fields) for entry_id, fields in entries]

    async def _xread(
        self, after: str, limit: int, block: int | None
    ) -> list[tuple[str, dict[str, str]]]:
        """``XREAD`` on this handle's own connection, each entry as the client's ``xread``
        gives it (its id and its fields), past the client's per-command layers (its pool,
        retry and reply shaping), which cost more than the command on the members' hot path
        (ADR 0191). A cancelled or failed read drops the connection, so no reply is ever left
        for the next command to read as its own, and the next read connects again."""
        conn = self._read_conn
        if conn is None:
            pool = self.client.connection_pool
            conn = self._read_conn = pool.make_connection()  # type: ignore[no-untyped-call]
        args: list[Any] = ["XREAD", "COUNT", limit]
        if block is not None:
            args += ["BLOCK", block]
        self._read_busy = True
        try:
            await conn.send_command(*args, "STREAMS", self.stream_key, after)
            reply = await conn.read_response()
        except BaseException:
            with anyio.CancelScope(shield=True):  # a cancelled read still drops it
                await conn.disconnect(nowait=True)
            raise
        finally:
            self._read_busy = False
        if not reply:
            return []
        # RESP3: {key: entries}; RESP2: [[key, entries]]; an entry's fields come flat
        found = reply.get(self.stream_key, ()) if isinstance(reply, dict) else reply[0][1]
        return [(entry_id, _pairs(flat)) for entry_id, flat in found]

    async def read_back(
        self, *, before_seq: int, members: Mapping[str, float], not_before: float
    ) -> Backlog:
        # ids have millisecond resolution; round up so float error never widens the window
        low = str(max(0, math.ceil(not_before * 1000 - 1e-6)))
        high = "(" + stream_id_of(before_seq)
        records: list[LogRecord] = []
        leave_since: dict[int, float] = {}
        while True:
            page = await self._call(
                self.client.xrevrange(self.stream_key, max=high, min=low, count=1000)
            )
            for entry_id, fields in page:
                record = self._decode(entry_id, fields)
                records.append(record)
                if isinstance(record, Leave):
                    leave_since[record.seq] = int(fields["si"]) / 1000.0
            if len(page) < 1000:
                break
            high = "(" + page[-1][0]
        records.reverse()
        return Backlog(rewind_members(members, records, leave_since), records)

    async def recent_history(
        self, conversation: str, limit: int = 20, *, up_to_seq: int | None = None
    ) -> list[Turn | Frame]:
        # scans back at most _HISTORY_SCAN entries of the channel: history is a convenience
        # for the agent, not part of the ownership decisions
        high = "+" if up_to_seq is None else stream_id_of(up_to_seq)
        out: list[Turn | Frame] = []
        scanned = 0
        while scanned < _HISTORY_SCAN and len(out) < limit:
            page = await self._call(
                self.client.xrevrange(self.stream_key, max=high, min="-", count=500)
            )
            for entry_id, fields in page:
                if fields.get("c") == conversation and fields.get("k") in ("t", "f"):
                    record = self._decode(entry_id, fields)
                    assert isinstance(record, Turn | Frame)
                    out.append(record)
                    if len(out) >= limit:
                        break
            scanned += len(page)
            if len(page) < 500:
                break
            high = "(" + page[-1][0]
        out.reverse()
        return out

    async def statistics(self) -> LogStatistics:
        members = await self._call(self.client.hlen(self.members_key))
        admitted, answered = await self._call(
            self.client.hmget(self.stats_key, ["admitted", "answered"])
        )
        return LogStatistics(int(members), int(admitted or 0), int(answered or 0))

    async def aclose(self) -> None:
        if self._read_conn is not None:
            await self._read_conn.disconnect()
        await self.client.aclose()


def _pairs(flat: list[str]) -> dict[str, str]:
    """A stream entry's fields as the server sends them (``field, value, …``), as a mapping."""
    it = iter(flat)
    return dict(zip(it, it, strict=True))
