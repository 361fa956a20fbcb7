"""One send budget per channel shared by every gateway on a Redis: the scale-out ``SendGate``.

Each gateway runs its own ``ChannelSender`` per channel; the channel's notifier runs on one of
them, but replies go out from whichever gateway answered the turn. Handing every sender of a
channel the same ``SharedBudgetGate`` makes them draw every send from one budget, so together
they stay within it (issue 7).

The decision is one Lua script run atomically on the Redis server, timed by the server's
``TIME`` (one clock for every gateway): it refills the channel's token bucket, checks every
sliding window against the recent send times, and either records the send and answers "go" or
records nothing and answers "wait N seconds". Per channel there are two keys under the
gateway's key prefix, hash-tagged to one cluster slot: ``<prefix>:budget:{<channel>}:bucket``
(tokens and when they were counted) and ``…:sends`` (the last ``max(window.limit)`` send times).
Both expire once the bucket would be full and every window empty again, so an idle channel's
keys clean themselves and a fresh key means exactly "nothing sent lately".

Priority across gateways (ADR 0055, "Priority"): each sender orders its own queue, but between
gateways the bucket is first come, first served unless the classes differ in what they must
leave behind. A send of class ``p`` needs ``1 + headroom(budget, p)`` tokens and takes one, where
``headroom`` is ``min(p, burst - 1)`` (TERMINAL 0, NEW 1, UPDATE 2, never the whole bucket): a
stream of intermediate edits always leaves two tokens, a new message one, so another gateway's
reply goes at once or at the next token, never behind the stream. Alone, a class keeps the full
sustained rate (only its burst is smaller by its headroom). Windows take no headroom: a window's
limit is a rate, and a slot kept free would cut a lone class's sustained rate (Discord's 5 in
5 s by a fifth). Instead a refused class claims the next send: the script records ``claim<p>``
in the bucket hash, "class ``p`` waits until T" (its wait plus ``CLAIM_MARGIN``, never more than
``CLAIM_LIMIT`` from now: a waiter is told to ask again before its claim runs out, and each ask
renews it), and refuses every lower class while a higher class's claim is unexpired; the
class's grant deletes its claim. So a slot a window frees goes to the reply that was waiting
for it, not to whoever asks first; a waiter that died holds lower classes back until T at
most; the lowest class records none, and no claim holds back its own class, so a class alone
keeps its rate. A lower class is told to wait at most one token's time, so a sender that asked
for an edit and meanwhile got a reply of its own loses no more time than before.

Redis unreachable (or refusing: a read-only replica after a failover, out of memory): sending
pauses. ``reserve`` answers "wait" (0.5 s, doubling to 5 s) until Redis records sends again,
logging a warning once per outage, naming the error, and a note when it is back. Falling back
to a local share of the budget would need the number of live gateways, which is itself read
from Redis; pausing is the only choice that keeps the guarantee (and with Redis gone, placement
and the agent groups stop too). What was queued is sent once Redis is back.

Exception hierarchy: none; no Redis error leaves ``reserve`` (a sender that raised would stop
its channel for good, where a pause heals by itself).
"""

from __future__ import annotations

import logging
import math
import uuid
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from bridge_core.provider import SendBudget
from bridge_core.sending.ops import Priority

__all__ = [
    "CLAIM_LIMIT",
    "CLAIM_MARGIN",
    "RETRY_MAX",
    "RETRY_MIN",
    "Grant",
    "SharedBudgetGate",
    "SharedBudgets",
    "headroom",
]

log = logging.getLogger("bridge_core.runtime.shared_budget")

RETRY_MIN = 0.5
RETRY_MAX = 5.0
# A refused class claims the next send until its wait is over plus this margin (its round trip
# and a late wake-up), and never longer than the limit from now (a waiter asks again before).
CLAIM_MARGIN = 0.25
CLAIM_LIMIT = 2.5

# KEYS: bucket hash, send-times sorted set.
# ARGV: burst, per_second, ttl_ms, member (unique per send), headroom (tokens this send must
# leave for higher classes), priority, whether a refusal records a claim ('1' for every class
# but the lowest), claim margin, claim limit (seconds), whether this is a peek ('1': a "go"
# records nothing, SendGate.peek), then limit/seconds pairs.
# Numbers leave Lua through string.format: Lua's own tostring keeps only 14 digits, which would
# round the server's epoch seconds to 0.1 ms.
_SCRIPT = """
local time = redis.call('TIME')
local now = tonumber(time[1]) + tonumber(time[2]) / 1000000
local burst = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local tokens = burst
local state = redis.call('HMGET', KEYS[1], 'tokens', 'updated')
if state[1] and state[2] then
  local elapsed = now - tonumber(state[2])
  tokens = tonumber(state[1])
  if elapsed > 0 then
    tokens = math.min(burst, tokens + elapsed * rate)
  end
end
local need = 1 + tonumber(ARGV[5])
local wait = 0
if tokens < need then
  -- at most one token's time: a lower class asks again soon, and its sender may meanwhile
  -- have a higher-class send of its own that fits already
  wait = math.min((need - tokens) / rate, 1 / rate)
end
local keep = 0
for i = 11, #ARGV, 2 do
  local limit = tonumber(ARGV[i])
  local seconds = tonumber(ARGV[i + 1])
  if limit > keep then keep = limit end
  -- the send `limit` places back must have left the window before another goes
  local back = redis.call('ZREVRANGE', KEYS[2], limit - 1, limit - 1, 'WITHSCORES')
  if back[2] then
    wait = math.max(wait, tonumber(back[2]) + seconds - now)
  end
end
local priority = tonumber(ARGV[6])
local claims = ARGV[7] == '1'
-- a higher class's unexpired claim refuses this class; ask again when it expires, or after
-- one token's time at most (its grant clears the claim earlier)
local claimed = 0
for class = 0, priority - 1 do
  claimed = math.max(claimed, tonumber(redis.call('HGET', KEYS[1], 'claim' .. class) or '0'))
end
if claimed > now then
  wait = math.max(wait, math.min(claimed - now, 1 / rate))
end
if wait > 1e-9 then
  if claims then
    -- ask again before the claim runs out, so a live waiter keeps it and a dead one holds
    -- lower classes back for `limit` seconds at most
    local margin = tonumber(ARGV[8])
    wait = math.min(wait, tonumber(ARGV[9]) - margin)
    redis.call('HSET', KEYS[1], 'claim' .. priority, string.format('%.6f', now + wait + margin))
    redis.call('PEXPIRE', KEYS[1], ARGV[3])
  end
  return {'wait', string.format('%.6f', math.ceil(wait * 1000000) / 1000000)}
end
if ARGV[10] == '1' then
  return {'go', string.format('%.6f', now)}
end
redis.call('HSET', KEYS[1], 'tokens', string.format('%.12f', tokens - 1),
  'updated', string.format('%.6f', now))
if claims then
  redis.call('HDEL', KEYS[1], 'claim' .. priority)
end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
if keep > 0 then
  redis.call('ZADD', KEYS[2], string.format('%.6f', now), ARGV[4])
  redis.call('ZREMRANGEBYRANK', KEYS[2], 0, -(keep + 1))
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
end
return {'go', string.format('%.6f', now)}
"""


def headroom(budget: SendBudget, priority: int) -> int:
    """Tokens a send of ``priority`` (a ``Priority``) must leave in the bucket for the classes
    above it.

    One per class above (TERMINAL 0, NEW 1, UPDATE 2), but never the whole bucket, so every
    class can send at the full sustained rate on any budget (with burst 1 there is no priority).
    """
    return min(int(priority), budget.burst - 1)


@dataclass(frozen=True, slots=True)
class Grant:
    """A shared gate's answer: ``wait == 0`` means one send was recorded at ``at`` (the Redis
    server's clock, epoch seconds); otherwise wait ``wait`` seconds and ask again."""

    wait: float
    at: float | None = None

    @property
    def go(self) -> bool:
        return self.wait == 0.0


class SharedBudgets:
    """One Redis connection serving the shared gates of every channel of a gateway."""

    def __init__(self, redis: Redis, *, prefix: str) -> None:
        self._redis = redis
        self._prefix = prefix
        self._script = redis.register_script(_SCRIPT)
        self._sender_id = uuid.uuid4().hex[:12]  # send-time members never collide across gateways
        self._sends = 0

    @classmethod
    def connect(cls, url: str, *, prefix: str, timeout: float = 2.0) -> SharedBudgets:
        """A client for ``url``; a call that hangs past ``timeout`` counts as Redis unreachable."""
        redis = Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)
        return cls(redis, prefix=prefix)

    async def aclose(self) -> None:
        await self._redis.aclose()

    def gate(self, channel: str, budget: SendBudget) -> SharedBudgetGate:
        """The gate for ``channel`` (the same name on every gateway means the same budget)."""
        return SharedBudgetGate(self, channel, budget)

    def _keys(self, channel: str) -> list[str]:
        base = f"{self._prefix}:budget:{{{channel}}}"
        return [f"{base}:bucket", f"{base}:sends"]

    def _member(self) -> str:
        self._sends += 1
        return f"{self._sender_id}:{self._sends}"

    async def _run(self, keys: list[str], args: list[Any]) -> Grant:
        reply: Any = await self._script(keys=keys, args=[*args[:3], self._member(), *args[3:]])
        verdict, seconds = reply[0], float(reply[1])
        if verdict == b"go":
            return Grant(0.0, seconds)
        return Grant(max(seconds, 1e-6))


class SharedBudgetGate:
    """A ``SendGate`` drawing every send to one channel from the budget kept in Redis."""

    def __init__(self, budgets: SharedBudgets, channel: str, budget: SendBudget) -> None:
        self.channel = channel
        self.budget = budget
        self._budgets = budgets
        self._keys = budgets._keys(channel)
        longest = max((w.seconds for w in budget.windows), default=0.0)
        # idle this long, the bucket is full and every window empty: the key may go
        ttl = max(longest, budget.burst / budget.per_second) + 1.0
        head: list[Any] = [budget.burst, repr(budget.per_second), math.ceil(ttl * 1000)]
        windows: list[Any] = []
        for window in budget.windows:
            windows += [window.limit, repr(window.seconds)]
        lowest = max(Priority)
        self._args = {
            (int(p), peek): [
                *head,
                headroom(budget, p),
                int(p),
                "1" if p < lowest else "0",  # nobody is below the lowest class to hold back
                repr(CLAIM_MARGIN),
                repr(CLAIM_LIMIT),
                "1" if peek else "0",
                *windows,
            ]
            for p in Priority
            for peek in (False, True)
        }
        self._retry = 0.0
        self.outages = 0  # how many times Redis became unreachable (for tests and metrics)

    async def take(self, *, priority: int, peek: bool = False) -> Grant:
        """Ask Redis once for a send of ``priority``: a recorded send, or how long to wait (also
        while Redis is away). ``peek``: a "go" records nothing (``SendGate.peek``)."""
        args = self._args.get((priority, peek))
        if args is None:
            raise ValueError(f"priority must be a Priority (0, 1 or 2), got {priority!r}")
        try:
            grant = await self._budgets._run(self._keys, args)
        except (RedisError, OSError) as error:
            if not self._retry:
                self.outages += 1
                log.warning(
                    "channel %s: the shared send budget in Redis is unavailable (%r); sends to "
                    "it pause until Redis answers again, so gateways never exceed it together",
                    self.channel,
                    error,
                )
            self._retry = min(RETRY_MAX, self._retry * 2) if self._retry else RETRY_MIN
            return Grant(self._retry)
        if self._retry:
            log.warning("channel %s: the shared send budget is reachable again", self.channel)
            self._retry = 0.0
        return grant

    async def reserve(self, now: float, *, priority: int) -> float:
        """``SendGate``: Redis keeps the clock, so ``now`` is not used; ``priority`` sets the
        headroom the send must leave for higher classes of every gateway."""
        del now
        return (await self.take(priority=priority)).wait

    async def peek(self, now: float, *, priority: int) -> float:
        """``SendGate``: ``reserve``'s answer, but a "go" records no send (a refusal still
        records the class's claim on the next send: the asker is waiting for it)."""
        del now
        return (await self.take(priority=priority, peek=True)).wait
