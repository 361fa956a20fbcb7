"""``ChannelPositions``: bounded, least recently active dropped, coalesced writes, and a store
that fails or holds an unreadable value never stops inbound."""

from __future__ import annotations

import json
import logging
from collections import OrderedDict

import pytest

from bridge_core import ChannelPositions
from bridge_core.ledger.kv import MemoryKeyValueStore

pytestmark = pytest.mark.anyio

LOG = logging.getLogger("tests.read_back")


def encode(channels: OrderedDict[str, int]) -> bytes:
    return json.dumps(list(channels.items())).encode()


def decode(raw: bytes, limit: int) -> OrderedDict[str, int] | None:
    try:
        return OrderedDict((str(k), int(v)) for k, v in json.loads(raw)[-limit:])
    except (ValueError, TypeError):
        return None


class CountingKV(MemoryKeyValueStore):
    def __init__(self, *, fail: bool = False) -> None:
        super().__init__()
        self.fail, self.puts = fail, 0

    async def get(self, namespace: str, key: str) -> bytes | None:
        if self.fail:
            raise OSError("the store is down")
        return await super().get(namespace, key)

    async def put(self, namespace: str, key: str, value: bytes) -> None:
        if self.fail:
            raise OSError("the store is down")
        self.puts += 1
        await super().put(namespace, key, value)


def positions(kv: MemoryKeyValueStore, limit: int = 2) -> ChannelPositions[str, int]:
    return ChannelPositions(
        kv, namespace="ns", profile="p", limit=limit, encode=encode, decode=decode, log=LOG
    )


async def test_the_least_recently_active_goes_and_writes_are_coalesced() -> None:
    kv = CountingKV()
    kept = positions(kv)
    assert await kept.load()
    kept.put("a", 1)
    kept.put("b", 2)
    kept.put("a", 3)  # a is now the most recently active
    kept.put("c", 4)  # past the limit: b goes
    await kept.flush()
    await kept.flush()  # nothing changed since: no second write
    assert kv.puts == 1
    again = positions(kv)
    assert await again.load()
    assert again.newest_first() == [("c", 4), ("a", 3)]


async def test_an_unreadable_value_is_replaced_and_a_failing_store_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    kv = CountingKV()
    await kv.put("ns", "p", b"\xff not json")
    kept = positions(kv)
    assert await kept.load() and kept.newest_first() == []
    await kept.flush()  # the bad value is replaced
    assert (await kv.get("ns", "p")) == b"[]"
    kv.fail = True
    with caplog.at_level(logging.WARNING, logger=LOG.name):
        assert not await positions(kv).load()
        kept.put("a", 1)
        await kept.flush_or_log()  # logged, not raised
    assert "reading the backfill positions failed" in caplog.text
    assert "writing the backfill positions failed" in caplog.text
    kv.fail = False
    await kept.flush()  # the failed write is carried by the next one
    assert (await kv.get("ns", "p")) == b'[["a", 1]]'
