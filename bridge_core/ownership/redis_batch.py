"""Concurrent calls of the Redis log's scripts, sent together: one pipeline a round trip.

Each admission and each frame is still one Lua script, which Redis runs atomically (ADR 0032).
A pipeline only puts several ``EVALSHA`` commands in one write and reads their replies
together; it is not a ``MULTI`` transaction, so one script's error touches no other call. The
calls made while a pipeline is in flight wait for the next one, so batches grow with the load
and a lone call goes at once (ADR 0120).

The pipeline names scripts by their SHA1 without asking the server first (redis-py's own
pipeline scripts cost a ``SCRIPT EXISTS`` round trip on every execute); a server that does not
know a script (restarted, ``SCRIPT FLUSH``) answers ``NOSCRIPT`` for that call without running
it, so those calls are sent again once the script is loaded.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import anyio
import anyio.lowlevel
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError
from redis.exceptions import TimeoutError as RedisTimeoutError

__all__ = ["ScriptBatcher"]

_Call = tuple[Any, Sequence[str], Sequence[Any]]  # (AsyncScript, keys, args)


class _Lost:
    """The reply of a call whose pipeline got no answer (each caller raises its own error)."""

    __slots__ = ("error",)

    def __init__(self, error: Exception) -> None:
        self.error = error


class _Batch:
    """Calls sent in one pipeline; every caller waits on the batch's one event."""

    __slots__ = ("calls", "done", "replies")

    def __init__(self) -> None:
        self.calls: list[_Call] = []
        self.replies: list[Any] = []
        self.done = anyio.Event()


class ScriptBatcher:
    """Runs ``call(script, keys, args)`` for concurrent callers, a pipeline at a time."""

    def __init__(
        self, client: aioredis.Redis, *, unavailable: Callable[[Exception], Exception]
    ) -> None:
        self._client = client
        self._unavailable = unavailable  # builds the error every caller of a lost batch gets
        self._open: _Batch | None = None
        self._sending = False
        self.pipelines = 0  # round trips made (statistics for benchmarks and tests)

    async def call(self, script: Any, keys: Sequence[str], args: Sequence[Any]) -> Any:
        batch = self._open
        if batch is None:
            batch = self._open = _Batch()
        index = len(batch.calls)
        batch.calls.append((script, keys, args))
        if not self._sending:
            self._sending = True
            try:
                # every queued caller gets its reply even if this one is cancelled meanwhile
                with anyio.CancelScope(shield=True):
                    while self._open is not None:
                        # let the callers woken by the last reply queue their next calls, so
                        # batches grow with the load instead of alternating big and small
                        await anyio.lowlevel.checkpoint()
                        sending, self._open = self._open, None
                        if sending is not None:
                            sending.replies = await self._send(sending.calls)
                            sending.done.set()
            finally:
                self._sending = False
        await batch.done.wait()
        reply = batch.replies[index]
        if isinstance(reply, _Lost):
            raise self._unavailable(reply.error) from reply.error
        if isinstance(reply, Exception):
            raise reply
        return reply

    async def _send(self, calls: Sequence[_Call], *, retry: bool = True) -> list[Any]:
        """The replies of ``calls`` in order: a value, or the exception for that call."""
        pipe = self._client.pipeline(transaction=False)
        for script, keys, args in calls:
            pipe.evalsha(script.sha, len(keys), *keys, *args)
        self.pipelines += 1
        try:
            replies: list[Any] = await pipe.execute(raise_on_error=False)
        except (RedisConnectionError, RedisTimeoutError, OSError) as error:
            return [_Lost(error)] * len(calls)
        missing = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
        if missing and retry:
            try:
                for script in {id(calls[i][0]): calls[i][0] for i in missing}.values():
                    script.sha = await self._client.script_load(script.script)
            except (RedisConnectionError, RedisTimeoutError, OSError) as error:
                for i in missing:
                    replies[i] = _Lost(error)
                return replies
            again = await self._send([calls[i] for i in missing], retry=False)
            for i, reply in zip(missing, again, strict=True):
                replies[i] = reply
        return replies
