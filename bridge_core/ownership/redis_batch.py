"""Concurrent admissions and frames of one Redis log, written by one script call.

The writes queued while a call is in flight go together in the next one: ``WRITE_MANY`` runs
them in the order they were queued, each admission checking and setting its own dedup key
before appending its turn, and answers one stream id (or nil for a duplicate) per write
(ADR 0130; before it, each write was its own ``EVALSHA`` in a shared pipeline, ADR 0120).
One script call instead of one per write: Redis serves the blocked readers once per command,
so a member's ``XREAD`` gets the whole batch instead of one entry, and the client packs and
parses one command instead of many. Batches grow with the load and a lone write goes at once.

A batch longer than ``MAX_WRITES`` is split into several calls sent in one pipeline (one
script must not hold the server for long). Scripts are named by their SHA1 without asking the
server first; a server that does not know the script (restarted, ``SCRIPT FLUSH``) answers
``NOSCRIPT`` without running it, so that call is sent again once the script is loaded.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Sequence
from typing import Any

import anyio
import anyio.lowlevel
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError
from redis.exceptions import TimeoutError as RedisTimeoutError

__all__ = ["ADMIT", "FRAME", "MAX_WRITES", "WRITE_MANY", "WriteBatcher"]

ADMIT = "a"
FRAME = "f"
MAX_WRITES = 128

# KEYS: the stream, the stats hash, then one dedup key per admission (in order);
# ARGV: seen ttl (ms), stream max length, then every write's kind and values in order as one
# JSON array (one argument for the client to pack, not one per value; cjson is built into
# Redis's Lua), a write being
#   'a', conversation, message id, author, text, thread ('' for none)
#   'f', conversation, answered seq, member, obligation
# the entries are the ones the per-write scripts of ADR 0120 appended, field for field.
# Redis refuses a script's first write when it is out of memory, before anything changed;
# the commands here fail after that only on keys of the wrong type, which breaks every write
WRITE_MANY = """
local v = cjson.decode(ARGV[3])
local out, key, i = {}, 3, 1
local admitted, answered = 0, 0
while i <= #v do
  if v[i] == 'a' then
    if redis.call('SET', KEYS[key], '1', 'NX', 'PX', ARGV[1]) then
      if v[i + 5] == '' then
        out[#out + 1] = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[2], '*', 'k', 't',
          'c', v[i + 1], 'm', v[i + 2], 'a', v[i + 3], 'x', v[i + 4])
      else
        out[#out + 1] = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[2], '*', 'k', 't',
          'c', v[i + 1], 'm', v[i + 2], 'a', v[i + 3], 'x', v[i + 4], 'th', v[i + 5])
      end
      admitted = admitted + 1
    else
      out[#out + 1] = false
    end
    key = key + 1
    i = i + 6
  else
    out[#out + 1] = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[2], '*', 'k', 'f',
      'c', v[i + 1], 's', v[i + 2], 'mb', v[i + 3], 'o', v[i + 4])
    answered = answered + 1
    i = i + 5
  end
end
if admitted > 0 then redis.call('HINCRBY', KEYS[2], 'admitted', admitted) end
if answered > 0 then redis.call('HINCRBY', KEYS[2], 'answered', answered) end
return out
"""

_Write = tuple[str | None, Sequence[str]]  # (dedup key of an admission or None, kind and values)


class _Lost:
    """The reply of a write whose call got no answer (each caller raises its own error)."""

    __slots__ = ("error",)

    def __init__(self, error: Exception) -> None:
        self.error = error


class _Batch:
    """Writes sent together; every caller waits on the batch's one event."""

    __slots__ = ("done", "replies", "writes")

    def __init__(self) -> None:
        self.writes: list[_Write] = []
        self.replies: list[Any] = []
        self.done = anyio.Event()


class WriteBatcher:
    """Runs ``write(seen_key, values)`` for concurrent callers, a batch at a time."""

    def __init__(
        self,
        client: aioredis.Redis,
        *,
        stream_key: str,
        stats_key: str,
        seen_ttl_ms: int,
        max_len: int,
        unavailable: Callable[[Exception], Exception],
    ) -> None:
        self._client = client
        self._script = client.register_script(WRITE_MANY)
        self._head = (stream_key, stats_key)
        self._limits = (seen_ttl_ms, max_len)
        self._unavailable = unavailable  # builds the error every caller of a lost batch gets
        self._open: _Batch | None = None
        self._sending = False
        self.pipelines = 0  # round trips made (statistics for benchmarks and tests)

    async def write(self, seen_key: str | None, values: Sequence[str]) -> Any:
        """The new entry's stream id; ``None`` for an admission whose id was seen before.

        ``values`` is the write's kind and values as ``WRITE_MANY`` takes them; ``seen_key``
        is an admission's dedup key (``None`` for a frame)."""
        batch = self._open
        if batch is None:
            batch = self._open = _Batch()
        index = len(batch.writes)
        batch.writes.append((seen_key, values))
        if not self._sending:
            self._sending = True
            try:
                # every queued caller gets its reply even if this one is cancelled meanwhile
                with anyio.CancelScope(shield=True):
                    while self._open is not None:
                        # let the callers woken by the last reply queue their next writes, so
                        # batches grow with the load instead of alternating big and small
                        await anyio.lowlevel.checkpoint()
                        sending, self._open = self._open, None
                        if sending is not None:
                            sending.replies = await self._send(sending.writes)
                            sending.done.set()
            finally:
                self._sending = False
        await batch.done.wait()
        reply = batch.replies[index]
        if isinstance(reply, _Lost):
            raise self._unavailable(reply.error) from reply.error
        if isinstance(reply, Exception):
            # the callers of one failed call share its error: each raises its own copy
            raise copy.copy(reply) from reply
        return reply

    def _call(self, writes: Sequence[_Write]) -> list[Any]:
        """``EVALSHA`` arguments running ``writes`` in order."""
        keys = list(self._head)
        values: list[str] = []
        for seen_key, write in writes:
            if seen_key is not None:
                keys.append(seen_key)
            values += write
        packed = json.dumps(values, ensure_ascii=False, separators=(",", ":"))
        return [self._script.sha, len(keys), *keys, *self._limits, packed]

    async def _send(self, writes: Sequence[_Write], *, retry: bool = True) -> list[Any]:
        """One reply per write, in order: a stream id, ``None``, or the call's exception."""
        chunks = [writes[i : i + MAX_WRITES] for i in range(0, len(writes), MAX_WRITES)]
        self.pipelines += 1
        try:
            if len(chunks) == 1:
                try:
                    answers: list[Any] = [await self._client.evalsha(*self._call(writes))]
                except (NoScriptError, RedisConnectionError, RedisTimeoutError, OSError):
                    raise
                except Exception as error:  # this call's own error (e.g. WRONGTYPE)
                    answers = [error]
            else:
                pipe = self._client.pipeline(transaction=False)
                for chunk in chunks:
                    pipe.evalsha(*self._call(chunk))
                answers = await pipe.execute(raise_on_error=False)
        except NoScriptError as error:
            answers = [error]
        except (RedisConnectionError, RedisTimeoutError, OSError) as error:
            return [_Lost(error)] * len(writes)
        if retry and any(isinstance(answer, NoScriptError) for answer in answers):
            # a call answered NOSCRIPT ran nothing: load the script, send those calls again
            try:
                self._script.sha = await self._client.script_load(WRITE_MANY)
            except (RedisConnectionError, RedisTimeoutError, OSError) as error:
                answers = [
                    _Lost(error) if isinstance(answer, NoScriptError) else answer
                    for answer in answers
                ]
            else:
                for index, answer in enumerate(answers):
                    if isinstance(answer, NoScriptError):
                        again = await self._send(chunks[index], retry=False)
                        answers[index] = _Again(again)
        replies: list[Any] = []
        for chunk, answer in zip(chunks, answers, strict=True):
            if isinstance(answer, _Again):
                replies += answer.replies
            elif isinstance(answer, Exception | _Lost):
                replies += [answer] * len(chunk)
            else:
                replies += answer
        return replies


class _Again:
    """The replies of a chunk sent a second time after ``NOSCRIPT``."""

    __slots__ = ("replies",)

    def __init__(self, replies: list[Any]) -> None:
        self.replies = replies
