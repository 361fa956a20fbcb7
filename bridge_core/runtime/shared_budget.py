"""One send budget per channel shared by every gateway on a Redis: the scale-out ``SendGate``.

Each gateway runs its own ``ChannelSender`` per channel; the channel's notifier runs on one of
them, but replies go out from whichever gateway answered the turn. Handing every sender of a
channel the same ``SharedBudgetGate`` makes them draw every send from one budget, so together
they stay within it (issue 7).

The decision is one Lua script run atomically on the Redis server, timed by the server's
``TIME`` (one clock for every gateway): it refills the channel's token bucket, checks every
sliding window against the recent send times, and either records the send and answers "go" or
records nothing and answers "wait N seconds". Per channel there are three keys under the
gateway's key prefix, hash-tagged to one cluster slot: ``<prefix>:budget:{<channel>}:bucket``
(tokens and when they were counted), ``…:sends`` (the last ``max(window.limit)`` send times)
and ``…:flying`` (the sends in flight, below). All expire once every lease has run out and the
bucket would be full and every window empty again, so an idle channel's keys clean themselves
and a fresh key means exactly "nothing sent lately".

A send counts as arriving at every moment from its grant until its call ends (ADR 0145): the
platform counts a request when it arrives, anywhere up to the end of the call, and a gateway
descheduled mid-call would otherwise have its send arrive after the other gateways' grants that
were decided as if it had arrived already (on a bucket refilled meanwhile: ``burst + 1`` at once).
``reserve`` records the send in flight (a third key, ``…:flying``, scored by the end of its
lease); while it is, the bucket refills to one token less per send in flight and every window
counts it at "now"; the sender then reports its end (``ended``, a second script run and round
trip), from which it counts at its end's time. A send whose end is never reported (its gateway
died mid-call) ends when its lease (``CALL_LEASE``, longer than any provider's call deadline)
runs out, so it holds its token that long and no longer.

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
    "CALL_LEASE",
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

# A send the sender reserved is "in flight" until its call ends (``SharedBudgetGate.ended``) or
# its lease runs out: longer than any provider's call deadline (the plugins allow 120 s at most),
# so a gateway killed mid-call holds its token that long and no longer (ADR 0145).
CALL_LEASE = 125.0

# Shared by both scripts. KEYS: bucket hash, send-times sorted set (sends that ended, scored by
# their end), in-flight sorted set (sends granted and not ended, scored by their lease's end).
# `advance` is the bucket at `now`: it refills at `rate` up to `burst` less the sends in flight
# (each counts as arriving now, whenever now is), and a send whose lease ran out ends at the
# lease's end, so the refill is replayed piecewise between those ends. `store` writes the state
# at `now` and gives every key the time after which the last lease has run out, the bucket is
# full and every window empty.
# Numbers leave Lua through string.format: Lua's own tostring keeps only 14 digits, which would
# round the server's epoch seconds to 0.1 ms.
_PRELUDE = """
local time = redis.call('TIME')
local now = tonumber(time[1]) + tonumber(time[2]) / 1000000
local function advance(burst, rate)
  local tokens, updated = burst, nil
  local state = redis.call('HMGET', KEYS[1], 'tokens', 'updated')
  if state[1] and state[2] then
    tokens, updated = tonumber(state[1]), tonumber(state[2])
  end
  local flying = redis.call('ZCARD', KEYS[3])
  tokens = math.min(tokens, burst - flying)
  local until_now = string.format('%.6f', now)
  local expired = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', until_now, 'WITHSCORES')
  for i = 1, #expired, 2 do
    local ends = tonumber(expired[i + 1])
    if updated and ends > updated then
      tokens = math.min(burst - flying, tokens + (ends - updated) * rate)
      updated = ends
    end
    flying = flying - 1
    redis.call('ZADD', KEYS[2], string.format('%.6f', ends), expired[i])
  end
  if #expired > 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', until_now)
  end
  if updated and now > updated then
    tokens = math.min(burst - flying, tokens + (now - updated) * rate)
  end
  return tokens, flying, #expired > 0
end
local function expire(ttl_ms)
  local last = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
  if last[2] then
    ttl_ms = ttl_ms + math.ceil((tonumber(last[2]) - now) * 1000)
  end
  for i = 1, 3 do
    redis.call('PEXPIRE', KEYS[i], ttl_ms)
  end
end
local function store(tokens, keep, ttl_ms)
  redis.call('HSET', KEYS[1], 'tokens', string.format('%.12f', tokens),
    'updated', string.format('%.6f', now))
  redis.call('ZREMRANGEBYRANK', KEYS[2], 0, -(keep + 1))
  expire(ttl_ms)
end
"""

# The grant. ARGV: burst, per_second, ttl_ms, member (unique per send), headroom (tokens this
# send must leave for higher classes), priority, whether a refusal records a claim ('1' for
# every class but the lowest), claim margin, claim limit (seconds), whether this is a peek
# ('1': a "go" records nothing, SendGate.peek), lease (seconds the send stays in flight unless
# it ends first; 0: it counts as arrived at its grant), then limit/seconds pairs.
_SCRIPT = (
    _PRELUDE
    + """
local burst = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local tokens, flying, expired = advance(burst, rate)
local need = 1 + tonumber(ARGV[5])
local wait = 0
if tokens < need then
  -- at most one token's time: a lower class asks again soon, and its sender may meanwhile
  -- have a higher-class send of its own that fits already (or a send in flight has ended)
  wait = math.min((need - tokens) / rate, 1 / rate)
end
local keep = 0
for i = 12, #ARGV, 2 do
  local limit = tonumber(ARGV[i])
  local seconds = tonumber(ARGV[i + 1])
  if limit > keep then keep = limit end
  if flying >= limit then
    -- the sends in flight count as arriving now: no slot frees before `seconds` from now
    wait = math.max(wait, seconds)
  else
    -- the send `limit` places back (those in flight being the latest) must have left the
    -- window before another goes
    local back = redis.call('ZREVRANGE', KEYS[2], limit - flying - 1, limit - flying - 1,
      'WITHSCORES')
    if back[2] then
      wait = math.max(wait, tonumber(back[2]) + seconds - now)
    end
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
if wait > 1e-9 or ARGV[10] == '1' then
  if expired then
    store(tokens, keep, tonumber(ARGV[3]))  -- the ended leases, before anything reads them
  end
end
if wait > 1e-9 then
  if claims then
    -- ask again before the claim runs out, so a live waiter keeps it and a dead one holds
    -- lower classes back for `limit` seconds at most
    local margin = tonumber(ARGV[8])
    wait = math.min(wait, tonumber(ARGV[9]) - margin)
    redis.call('HSET', KEYS[1], 'claim' .. priority, string.format('%.6f', now + wait + margin))
    expire(tonumber(ARGV[3]))
  end
  return {'wait', string.format('%.6f', math.ceil(wait * 1000000) / 1000000)}
end
if ARGV[10] == '1' then
  return {'go', string.format('%.6f', now)}
end
if claims then
  redis.call('HDEL', KEYS[1], 'claim' .. priority)
end
local lease = tonumber(ARGV[11])
if lease > 0 then
  redis.call('ZADD', KEYS[3], string.format('%.6f', now + lease), ARGV[4])
elseif keep > 0 then
  redis.call('ZADD', KEYS[2], string.format('%.6f', now), ARGV[4])
end
store(tokens - 1, keep, tonumber(ARGV[3]))
return {'go', string.format('%.6f', now)}
"""
)

# The end of a send's call. ARGV: burst, per_second, ttl_ms, member, keep (the largest window
# limit). From now the send counts as arrived at now: the windows score it now and the ceiling
# it lowered is back (the bucket keeps what it holds and refills from here).
_END_SCRIPT = (
    _PRELUDE
    + """
local burst = tonumber(ARGV[1])
local tokens, flying = advance(burst, tonumber(ARGV[2]))
local member = ARGV[4]
if redis.call('ZREM', KEYS[3], member) == 1 then
  redis.call('ZADD', KEYS[2], string.format('%.6f', now), member)
elseif redis.call('ZSCORE', KEYS[2], member) then
  -- its lease ran out before its call ended (a call past every deadline): count it from now,
  -- as the in-process gate does (what refilled since its lease ended is not its to keep)
  redis.call('ZADD', KEYS[2], string.format('%.6f', now), member)
  tokens = math.min(tokens, burst - flying - 1)
end
store(tokens, tonumber(ARGV[5]), tonumber(ARGV[3]))
return 'ok'
"""
)


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
    server's clock, epoch seconds) as ``send`` (its name in Redis, for ``SharedBudgetGate.end``);
    otherwise wait ``wait`` seconds and ask again."""

    wait: float
    at: float | None = None
    send: str | None = None

    @property
    def go(self) -> bool:
        return self.wait == 0.0


class SharedBudgets:
    """One Redis connection serving the shared gates of every channel of a gateway."""

    def __init__(self, redis: Redis, *, prefix: str) -> None:
        self._redis = redis
        self._prefix = prefix
        self._script = redis.register_script(_SCRIPT)
        self._end_script = redis.register_script(_END_SCRIPT)
        self._sender_id = uuid.uuid4().hex[:12]  # send-time members never collide across gateways
        self._sends = 0

    @classmethod
    def connect(cls, url: str, *, prefix: str, timeout: float = 2.0) -> SharedBudgets:
        """A client for ``url``; a call that hangs past ``timeout`` counts as Redis unreachable."""
        redis = Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)
        return cls(redis, prefix=prefix)

    async def aclose(self) -> None:
        await self._redis.aclose()

    def gate(
        self, channel: str, budget: SendBudget, *, lease: float = CALL_LEASE
    ) -> SharedBudgetGate:
        """The gate for ``channel`` (the same name on every gateway means the same budget), for
        one sender; ``lease``: how long a send stays in flight unless its end is reported."""
        return SharedBudgetGate(self, channel, budget, lease=lease)

    def _keys(self, channel: str) -> list[str]:
        base = f"{self._prefix}:budget:{{{channel}}}"
        return [f"{base}:bucket", f"{base}:sends", f"{base}:flying"]

    def _member(self) -> str:
        self._sends += 1
        return f"{self._sender_id}:{self._sends}"

    async def _run(self, keys: list[str], args: list[Any]) -> Grant:
        member = self._member()
        reply: Any = await self._script(keys=keys, args=[*args[:3], member, *args[3:]])
        verdict, seconds = reply[0], float(reply[1])
        if verdict == b"go":
            return Grant(0.0, seconds, member)
        return Grant(max(seconds, 1e-6))

    async def _end(self, keys: list[str], args: list[Any], send: str) -> None:
        await self._end_script(keys=keys, args=[*args[:3], send, *args[3:]])


class SharedBudgetGate:
    """A ``SendGate`` drawing every send to one channel from the budget kept in Redis.

    Serves one sender, which sends one operation at a time: a send ``reserve`` grants is in
    flight, counted as arriving at every moment, until the sender reports its call's end
    (``ended``) or ``lease`` seconds have passed (ADR 0145).
    """

    def __init__(
        self,
        budgets: SharedBudgets,
        channel: str,
        budget: SendBudget,
        *,
        lease: float = CALL_LEASE,
    ) -> None:
        if lease <= 0:
            raise ValueError(f"lease must be positive (seconds), got {lease!r}")
        self.channel = channel
        self.budget = budget
        self.lease = lease
        self._flying: str | None = None
        self._budgets = budgets
        self._keys = budgets._keys(channel)
        longest = max((w.seconds for w in budget.windows), default=0.0)
        # idle this long, the bucket is full and every window empty: the key may go
        ttl = max(longest, budget.burst / budget.per_second) + 1.0
        head: list[Any] = [budget.burst, repr(budget.per_second), math.ceil(ttl * 1000)]
        windows: list[Any] = []
        for window in budget.windows:
            windows += [window.limit, repr(window.seconds)]
        self._windows = windows
        self._end_args = [*head, max((w.limit for w in budget.windows), default=0)]
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
            ]
            for p in Priority
            for peek in (False, True)
        }
        self._retry = 0.0
        self.outages = 0  # how many times Redis became unreachable (for tests and metrics)

    async def take(self, *, priority: int, peek: bool = False, lease: float | None = None) -> Grant:
        """Ask Redis once for a send of ``priority``: a recorded send, or how long to wait (also
        while Redis is away). ``peek``: a "go" records nothing (``SendGate.peek``). ``lease``:
        the send is in flight until ``end(grant)`` or that many seconds; None: it counts as
        arrived at its grant (a call that takes no time)."""
        args = self._args.get((priority, peek))
        if args is None:
            raise ValueError(f"priority must be a Priority (0, 1 or 2), got {priority!r}")
        try:
            grant = await self._budgets._run(
                self._keys, [*args, repr(lease or 0.0), *self._windows]
            )
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
        return Grant(0.0, grant.at) if peek and grant.go else grant  # a peek recorded no send

    async def end(self, grant: Grant) -> None:
        """The call of the send ``grant`` recorded has ended (answered or failed): from now it
        counts as arrived now, on Redis's clock. Redis unreachable: it stays in flight until its
        lease runs out, which only errs on the side of the budget."""
        if grant.send is None:
            return
        try:
            await self._budgets._end(self._keys, self._end_args, grant.send)
        except (RedisError, OSError) as error:
            log.debug("channel %s: the end of a send was not recorded (%r)", self.channel, error)

    async def reserve(self, now: float, *, priority: int) -> float:
        """``SendGate``: Redis keeps the clock, so ``now`` is not used; ``priority`` sets the
        headroom the send must leave for higher classes of every gateway. A send granted is in
        flight until ``ended``."""
        del now
        grant = await self.take(priority=priority, lease=self.lease)
        if grant.go:
            # one sender, one send at a time; were one still in flight it keeps its lease
            self._flying = grant.send
        return grant.wait

    async def ended(self, now: float) -> None:
        """``SendGate``: the send ``reserve`` granted last has ended (its call answered or
        failed, or it went unused); Redis keeps the clock, so ``now`` is not used."""
        del now
        send, self._flying = self._flying, None
        if send is not None:
            await self.end(Grant(0.0, send=send))

    async def peek(self, now: float, *, priority: int) -> float:
        """``SendGate``: ``reserve``'s answer, but a "go" records no send (a refusal still
        records the class's claim on the next send: the asker is waiting for it)."""
        del now
        return (await self.take(priority=priority, peek=True)).wait
