"""A streamed reply whose poster died after its final text was recorded: the next process's
boot sweep posts the final anew and marks the stale partial interrupted (virtual time, the
memory ledger played by two owners)."""

from __future__ import annotations

import pytest
from bridge_slack import SLACK_BUDGET

from bridge_core.ledger import DeliveryLedger, MemoryBackend, MemoryLedgerStore, Reply, State
from bridge_core.runtime.streaming import KV_NAMESPACE
from bridge_core.streams import CURSOR, INTERRUPTED

from .conftest import CHANNEL, paced

pytestmark = pytest.mark.anyio

WALL = 1_800_000_000.0


async def test_the_final_of_a_dead_poster_is_a_new_post_and_the_partial_says_interrupted(
    open_stream_channel,
) -> None:
    backend = MemoryBackend()
    dead = MemoryLedgerStore(backend, owner="host|1|dead")
    await dead.open()
    deltas = [(i * 0.5, f"d{i} ") for i in range(10)]
    full = "".join(text for _, text in deltas)
    async with open_stream_channel(budget=SLACK_BUDGET) as ch:
        # the first process streams, records the final with its partial, and dies before
        # sending it
        result = await ch.replies.consume("ob-x", paced(deltas), thread=None)
        (partial,) = result.partials
        reply = Reply(
            obligation_id="ob-x",
            profile="p",
            platform="console",
            channel=CHANNEL,
            text=result.text,
            chunks=tuple(ch.replies.split(result.text)),
            partials=result.partials,
        )
        await dead.record(reply, now=WALL)
        backend.kill("host|1|dead")
        await ch.replies.close("ob-x")
        # the next process: a fresh stream registry, the same channel
        store = MemoryLedgerStore(backend, owner="host|2|next")
        await store.open()
        ledger = DeliveryLedger(
            store,
            deliver=ch.replies.deliver,
            profiles={"p"},
            deliver_begins=True,
            clock=lambda: WALL + 10.0,
        )
        report = await ledger.boot_sweep()
        await ch.until_idle()
        entries = ch.entries()
        row = await store.get("ob-x")
    assert report.delivered == 1 and report.marked == 0  # its send never began: clean
    assert row is not None and row.state is State.DELIVERED
    posts = [e for e in entries if e.op == "post"]
    assert [p.text for p in posts] == ["d0 " + CURSOR, full]
    assert row.delivered[0].message_id == posts[1].message_id
    last = [e for e in entries if e.message_id == partial.message_id][-1]
    assert last.op == "edit" and last.text == INTERRUPTED


async def test_a_reply_streamed_again_for_a_recorded_obligation_sends_nothing_new(
    open_stream_channel,
) -> None:
    # the same turn answered twice (a crash between its row and its frame, or two gateways):
    # the row recorded first is the answer, and the second stream's message says it is left
    # over, as on the gateway's own reply path (ChannelRuntime.record_reply)
    first = [(i * 0.5, f"a{i} ") for i in range(4)]
    again = [(60.0 + i * 0.5, f"b{i} ") for i in range(4)]
    async with open_stream_channel(budget=SLACK_BUDGET) as ch:
        row = await ch.stream("x", first)
        replay = await ch.stream("x", again)
        await ch.until_idle()
        entries = ch.entries()
    assert row.state is State.DELIVERED and replay.id == row.id
    assert replay.delivered == row.delivered  # nothing was sent again
    posts = [e for e in entries if e.op == "post"]
    assert len(posts) == 2  # each stream's first message
    texts = {p.message_id: [e.text for e in entries if e.message_id == p.message_id] for p in posts}
    assert texts[posts[0].message_id][-1] == "".join(text for _, text in first)
    assert texts[posts[1].message_id][-1] == INTERRUPTED


@pytest.mark.parametrize(
    "stored", [b"not json", b"[[1, 2]]", b'{"a": 1}', b"\xff\xfe", b"[" * 100_000], ids=repr
)
async def test_unreadable_stored_partials_do_not_stop_the_stream(
    open_stream_channel, stored: bytes
) -> None:
    # The worst an unreadable value can cost is a dead process's partial left unmarked: the
    # reply itself is shown and finished.
    async with open_stream_channel(budget=SLACK_BUDGET) as ch:
        await ch.kv.put(KV_NAMESPACE, "ob-y", stored)
        result = await ch.replies.consume(
            "ob-y", paced([(0.0, "all "), (0.5, "of it")]), thread=None
        )
        await ch.until_idle()
    assert result.text == "all of it"
