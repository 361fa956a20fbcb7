"""The claim made when a reply's turn comes (``deliver_begins=True``), and the guard against a
second attempt at a row this process is already sending. Virtual time over the memory store.

A paced channel holds a reply for its turn before the platform call; the row must stay
``pending`` (clean after a crash) until ``delivery.begin()`` claims it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import anyio
import pytest

from bridge_core.ledger import (
    MARKER,
    MARKER_PARTIAL,
    ClaimLost,
    Delivery,
    DeliveryLedger,
    MemoryBackend,
    MemoryLedgerStore,
    Reply,
    Schedule,
    State,
)
from bridge_core.provider import Forbidden, MessageRef, Unreachable
from bridge_core.testing.clock import anyio_backend

__all__ = ["anyio_backend"]

pytestmark = pytest.mark.anyio

BASE = 1_800_000_000.0


def wall() -> float:
    return BASE + anyio.current_time()


@dataclass
class PacedChannel:
    """A channel whose sends wait for their turn (``turns``, by id or ``id#part``), then
    ``begin()``, then may hang
    mid-send (``hold``); ``refuse`` fails a reply before its turn. Records what reached it."""

    sent: list[Delivery] = field(default_factory=list)
    turns: dict[str, anyio.Event] = field(default_factory=dict)
    hold: dict[str, anyio.Event] = field(default_factory=dict)
    refuse: dict[str, list[Exception]] = field(default_factory=dict)
    calls_begin: bool = True
    lost: list[str] = field(default_factory=list)

    async def deliver(self, delivery: Delivery) -> MessageRef:
        refusals = self.refuse.get(delivery.obligation_id)
        if refusals:
            raise refusals.pop(0)
        turn = self.turns.get(f"{delivery.obligation_id}#{delivery.part}")
        turn = turn or self.turns.get(delivery.obligation_id)
        if turn is not None:
            await turn.wait()
        if self.calls_begin:
            try:
                await delivery.begin()
            except ClaimLost:
                self.lost.append(delivery.obligation_id)
                raise
        held = self.hold.get(delivery.obligation_id)
        if held is not None:
            await held.wait()
        self.sent.append(delivery)
        return MessageRef(delivery.channel, f"m{len(self.sent)}", delivery.thread)

    def texts(self, obligation: str) -> list[str]:
        return [d.text for d in self.sent if d.obligation_id == obligation]


def reply(answers: str) -> Reply:
    return Reply.answering(
        profile="X", platform="slack", channel="C1", answers=answers, text=f"answer to {answers}"
    )


async def opened(
    backend: MemoryBackend, channel: PacedChannel, name: str, *, begins: bool = True
) -> tuple[MemoryLedgerStore, DeliveryLedger]:
    store = MemoryLedgerStore(backend, owner=f"host|{name}|0")
    await store.open()
    ledger = DeliveryLedger(
        store,
        deliver=channel.deliver,
        profiles={"X"},
        clock=wall,
        schedule=Schedule(resend_delays=(30.0, 120.0)),
        deliver_begins=begins,
    )
    return store, ledger


@pytest.mark.parametrize("begins", [True, False])
async def test_a_reply_waiting_for_its_turn_at_a_crash_goes_out_clean(begins: bool) -> None:
    """With the claim at the turn, only the reply whose send had begun is labelled; with the
    claim before ``deliver`` (the default) the queued one is labelled too."""
    backend, channel = MemoryBackend(), PacedChannel()
    store, first = await opened(backend, channel, "p1", begins=begins)
    mid, _ = await first.record(reply("mid-send"))
    queued, _ = await first.record(reply("queued"))
    channel.turns[queued.id] = anyio.Event()  # never comes in this process
    channel.hold[mid.id] = anyio.Event()  # began, never acknowledged
    async with anyio.create_task_group() as group:
        group.start_soon(first.deliver_now, mid)
        group.start_soon(first.deliver_now, queued)
        await anyio.sleep(1)
        assert (await store.get(mid.id)).state is State.ATTEMPTING  # type: ignore[union-attr]
        queued_state = (await store.get(queued.id)).state  # type: ignore[union-attr]
        assert queued_state is (State.PENDING if begins else State.ATTEMPTING)
        backend.kill(store.owner)
        group.cancel_scope.cancel()
    channel.turns.clear()
    channel.hold.clear()
    _, second = await opened(backend, channel, "p2", begins=begins)
    report = await second.boot_sweep()
    assert report.delivered == 2
    assert channel.texts(mid.id) == [f"{MARKER}\nanswer to mid-send"]
    expected = "answer to queued" if begins else f"{MARKER}\nanswer to queued"
    assert channel.texts(queued.id) == [expected]


async def test_a_reply_claimed_elsewhere_while_it_waited_is_not_sent_again() -> None:
    backend, channel = MemoryBackend(), PacedChannel()
    store, first = await opened(backend, channel, "p1")
    row, _ = await first.record(reply("slow-turn"))
    channel.turns[row.id] = anyio.Event()
    async with anyio.create_task_group() as group:
        group.start_soon(first.deliver_now, row)
        await anyio.sleep(1)
        backend.kill(store.owner)  # looks dead (a starved lease): another process recovers it
        _, second = await opened(backend, channel, "p2")
        first_turn = channel.turns.pop(row.id)
        assert (await second.boot_sweep()).delivered == 1
        first_turn.set()  # first's turn comes after second claimed and sent the row
    assert channel.lost == [row.id]  # first's begin() lost the claim: it sent nothing
    assert channel.texts(row.id) == ["answer to slow-turn"]


async def test_a_refusal_before_the_turn_leaves_the_row_clean_and_tries_again_later() -> None:
    backend, channel = MemoryBackend(), PacedChannel()
    store, ledger = await opened(backend, channel, "p1")
    row, _ = await ledger.record(reply("forbidden-now"))
    channel.refuse[row.id] = [Forbidden("channel unhealthy; re-check pending")]
    async with anyio.create_task_group() as group:
        await group.start(ledger.run)
        ended = await ledger.deliver_now(row)
        assert ended.state is State.PENDING and ended.attempts == 0
        assert ledger.timers == 1
        await anyio.sleep(29.9)
        assert channel.texts(row.id) == []
        await anyio.sleep(0.2)  # the first resend delay, 30 s, has passed
        group.cancel_scope.cancel()
    assert channel.texts(row.id) == ["answer to forbidden-now"]  # clean: nothing went out before
    assert (await store.get(row.id)).state is State.DELIVERED  # type: ignore[union-attr]


async def test_a_permanent_refusal_before_the_turn_abandons_the_row() -> None:
    backend, channel = MemoryBackend(), PacedChannel()
    _, ledger = await opened(backend, channel, "p1")
    row, _ = await ledger.record(reply("gone"))
    channel.refuse[row.id] = [Unreachable("channel was given up")]
    ended = await ledger.deliver_now(row)
    assert ended.state is State.ABANDONED and ended.attempts == 0
    assert "channel was given up" in (ended.last_error or "")
    assert channel.texts(row.id) == [] and ledger.timers == 0


async def test_a_delivery_function_that_never_begins_still_settles_its_row_once() -> None:
    backend, channel = MemoryBackend(), PacedChannel(calls_begin=False)
    _, ledger = await opened(backend, channel, "p1")
    ended = await ledger.submit(reply("careless"))
    assert ended.state is State.DELIVERED and ended.attempts == 1
    assert channel.texts(ended.id) == ["answer to careless"]
    assert (await ledger.sweep_due()).claimed == 0


@pytest.mark.parametrize("begins", [True, False])
async def test_delivering_a_row_already_in_flight_here_sends_no_second_copy(begins: bool) -> None:
    backend, channel = MemoryBackend(), PacedChannel()
    store, ledger = await opened(backend, channel, "p1", begins=begins)
    row, _ = await ledger.record(reply("in-flight"))
    channel.hold[row.id] = anyio.Event()
    async with anyio.create_task_group() as group:
        group.start_soon(ledger.deliver_now, row)
        await anyio.sleep(1)
        as_claimed = await store.get(row.id)
        assert as_claimed is not None and as_claimed.state is State.ATTEMPTING
        with anyio.fail_after(5):  # a second send would hang on the held channel
            again = await ledger.deliver_now(as_claimed)  # this owner may claim its own rows
        assert again.state is State.ATTEMPTING and again.fence == as_claimed.fence
        channel.hold[row.id].set()
    assert channel.texts(row.id) == ["answer to in-flight"]
    assert (await store.get(row.id)).state is State.DELIVERED  # type: ignore[union-attr]


async def test_a_later_part_whose_claim_was_taken_while_it_waited_is_not_sent() -> None:
    backend, channel = MemoryBackend(), PacedChannel()
    store, first = await opened(backend, channel, "p1")
    row, _ = await first.record(
        Reply.answering(
            profile="X",
            platform="slack",
            channel="C1",
            answers="long",
            text="part one part two",
            chunks=("part one", "part two"),
        )
    )
    second_turn = channel.turns[f"{row.id}#1"] = anyio.Event()
    async with anyio.create_task_group() as group:
        group.start_soon(first.deliver_now, row)
        await anyio.sleep(1)  # part one went out; part two waits for its turn
        assert channel.texts(row.id) == ["part one"]
        backend.kill(store.owner)  # its lease lapsed: another process recovers the reply
        _, other = await opened(backend, channel, "p2")
        del channel.turns[f"{row.id}#1"]
        assert (await other.boot_sweep()).delivered == 1
        second_turn.set()
    assert channel.lost == [row.id]  # the first process's part two found its claim gone
    assert channel.texts(row.id) == [
        "part one",
        f"{MARKER_PARTIAL}\npart two",
    ]


async def test_a_store_failure_mid_send_is_logged_not_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class FailingSettle(MemoryLedgerStore):
        async def settle(self, *args: object, **kwargs: object) -> None:  # type: ignore[override]
            raise RuntimeError("the database went away")

    backend, channel = MemoryBackend(), PacedChannel()
    store = FailingSettle(backend, owner="host|p1|0")
    await store.open()
    ledger = DeliveryLedger(
        store, deliver=channel.deliver, profiles={"X"}, clock=wall, deliver_begins=True
    )
    row, _ = await ledger.record(reply("unlucky"))
    ended = await ledger.deliver_now(row)  # a background task in the gateway: must not raise
    assert ended.id == row.id and channel.texts(row.id) == ["answer to unlucky"]
    assert "failed in the ledger itself" in caplog.text
    assert (await store.get(row.id)).state is State.ATTEMPTING  # type: ignore[union-attr]
