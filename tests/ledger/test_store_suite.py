"""One suite for every ledger store (memory, SQLite, PostgreSQL): the protocol's promises."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from bridge_core.ledger import Reply, Scope, State, key_value_store
from bridge_core.ledger.store import CLAIMABLE_STATES
from bridge_core.provider import MessageRef

pytestmark = pytest.mark.anyio

NOW = 1_800_000_000.0


def reply(answers: str, *, profile: str = "X", platform: str = "slack", **extra: object) -> Reply:
    return Reply.answering(
        profile=profile,
        platform=platform,
        channel=str(extra.pop("channel", "C1")),
        answers=answers,
        text=str(extra.pop("text", f"answer to {answers}")),
        thread="T1",
        reply_to=answers,
        **extra,  # type: ignore[arg-type]
    )


def dead_scope(**changes: object) -> Scope:
    base: dict[str, object] = {
        "owners": "dead",
        "states": CLAIMABLE_STATES,
        "due": "due_or_unset",
        "profiles": {"X", "Y"},
    }
    base.update(changes)
    return Scope(**base)  # type: ignore[arg-type]


async def test_record_is_durable_and_idempotent(harness: Any) -> None:
    store = await harness.store(me=True)
    first, created = await store.record(reply("m1", chunks=("a", "b")), now=NOW)
    assert created
    assert first.state is State.PENDING and first.attempts == 0 and first.fence == 0
    assert first.chunks == ("a", "b") and first.thread == "T1" and first.reply_to == "m1"
    assert first.owner == store.owner
    again, created_again = await store.record(reply("m1", text="different"), now=NOW + 5)
    assert not created_again
    assert again == first
    assert await store.get(first.id) == first
    assert await store.get("no such id") is None


async def test_claim_is_a_compare_and_swap_on_the_fence(harness: Any) -> None:
    store = await harness.store(me=True)
    row, _ = await store.record(reply("m1"), now=NOW)
    claimed = await store.claim(row.id, fence=row.fence, now=NOW + 1)
    assert claimed is not None
    assert claimed.state is State.ATTEMPTING
    assert (claimed.fence, claimed.attempts, claimed.resends) == (1, 1, 0)
    assert claimed.owner == store.owner and claimed.updated_at == NOW + 1
    assert await store.claim(row.id, fence=row.fence, now=NOW + 2) is None  # stale fence


async def test_concurrent_claims_have_one_winner(harness: Any) -> None:
    recorder = await harness.store()
    store = await harness.store(me=True)
    other = await harness.store()
    row, _ = await recorder.record(reply("m1"), now=NOW)
    await harness.kill(recorder)  # both live stores may now claim it
    results: list[object] = []

    async def claim(by: Any) -> None:
        results.append(await by.claim(row.id, fence=row.fence, now=NOW))

    async with anyio.create_task_group() as group:
        for index in range(10):
            group.start_soon(claim, store if index % 2 else other)
    winners = [result for result in results if result is not None]
    assert len(winners) == 1
    final = await store.get(row.id)
    assert final is not None and final.fence == 1 and final.attempts == 1


async def test_changes_are_conditioned_on_the_fence_and_owner(harness: Any) -> None:
    store = await harness.store(me=True)
    row, _ = await store.record(reply("m1"), now=NOW)
    claimed = await store.claim(row.id, fence=0, now=NOW)
    assert claimed is not None
    ref = MessageRef("C1", "100", "T1")
    assert not await store.settle(row.id, fence=0, state=State.DELIVERED, now=NOW, ref=ref)
    assert await store.settle(row.id, fence=1, state=State.DELIVERED, now=NOW + 1, ref=ref)
    done = await store.get(row.id)
    assert done is not None and done.state is State.DELIVERED and done.delivered == (ref,)
    # Settled: the fence holder can no longer change it, nobody can claim a final row.
    assert not await store.settle(row.id, fence=1, state=State.FAILED, now=NOW + 2)
    assert await store.claim(row.id, fence=1, now=NOW + 2) is None


async def test_progress_appends_parts_in_order(harness: Any) -> None:
    store = await harness.store(me=True)
    row, _ = await store.record(reply("m1", chunks=("a", "b", "c")), now=NOW)
    await store.claim(row.id, fence=0, now=NOW)
    refs = [MessageRef("C1", str(n), "T1") for n in range(3)]
    assert await store.progress(row.id, fence=1, ref=refs[0], now=NOW)
    assert await store.progress(row.id, fence=1, ref=refs[1], now=NOW)
    assert not await store.progress(row.id, fence=0, ref=refs[2], now=NOW)
    assert await store.settle(row.id, fence=1, state=State.DELIVERED, now=NOW, ref=refs[2])
    done = await store.get(row.id)
    assert done is not None and done.delivered == tuple(refs)


async def test_a_streamed_replys_partials_survive_every_change_of_its_row(harness: Any) -> None:
    store = await harness.store(me=True)
    partials = (MessageRef("C1", "p0", "T1"), MessageRef("C1", "p1\u00e9\"'", None))
    row, _ = await store.record(reply("m1", chunks=("a", "b"), partials=partials), now=NOW)
    assert row.partials == partials and row.chunks == ("a", "b")
    plain, _ = await store.record(reply("m2"), now=NOW)
    assert plain.partials == () and plain.chunks == ("answer to m2",)
    claimed = await store.claim(row.id, fence=row.fence, now=NOW + 1)
    assert claimed is not None and claimed.partials == partials
    assert await store.progress(row.id, fence=1, ref=partials[0], now=NOW + 2)
    settled = await store.settle(row.id, fence=1, state=State.DELIVERED, now=NOW, ref=partials[1])
    assert settled is not None and settled.partials == partials
    again = await store.get(row.id)
    assert again is not None and again.partials == partials and again.chunks == ("a", "b")
    assert again.reply.partials == partials


async def test_resend_budget_is_spent_except_after_a_penalty(harness: Any) -> None:
    store = await harness.store(me=True)
    row, _ = await store.record(reply("m1"), now=NOW)
    first = await store.claim(row.id, fence=0, now=NOW)
    assert first is not None and first.resends == 0
    await store.settle(
        row.id,
        fence=1,
        state=State.FAILED,
        now=NOW,
        penalty=True,
        next_attempt_at=NOW + 5,
        last_error="RateLimited",
    )
    waiting = await store.get(row.id)
    assert waiting is not None and waiting.penalty and waiting.next_attempt_at == NOW + 5
    second = await store.claim(row.id, fence=1, now=NOW + 5)
    assert second is not None and second.resends == 0 and not second.penalty
    assert second.last_error == "RateLimited" and second.next_attempt_at is None
    await store.settle(row.id, fence=2, state=State.FAILED, now=NOW, next_attempt_at=NOW + 30)
    third = await store.claim(row.id, fence=2, now=NOW + 30)
    assert third is not None and third.resends == 1 and third.attempts == 3


async def test_a_live_owners_rows_are_never_claimable(harness: Any) -> None:
    mine = await harness.store(me=True)
    other = await harness.store()
    row, _ = await other.record(reply("m1"), now=NOW)
    claimed = await other.claim(row.id, fence=0, now=NOW)
    assert claimed is not None
    assert await mine.candidates(dead_scope(), now=NOW) == []
    assert await mine.claim(row.id, fence=1, now=NOW) is None  # even with the right fence
    await harness.kill(other)
    found = await mine.candidates(dead_scope(), now=NOW)
    assert [r.id for r in found] == [row.id]
    taken = await mine.claim(row.id, fence=1, now=NOW)
    assert taken is not None and taken.owner == mine.owner and taken.fence == 2
    # The dead owner's late settle is refused: the fence moved on.
    assert not await other.settle(row.id, fence=1, state=State.DELIVERED, now=NOW)


async def test_proving_a_claim_keeps_it_and_fails_once_it_moved_on(harness: Any) -> None:
    holder = await harness.store()
    mine = await harness.store(me=True)
    row, _ = await holder.record(reply("m1", chunks=("a", "b")), now=NOW)
    assert await holder.claim(row.id, fence=0, now=NOW) is not None
    ref = MessageRef("C1", "1", "T1")
    assert await holder.progress(row.id, fence=1, ref=ref, now=NOW)
    held = await holder.prove_claim(row.id, fence=1, now=NOW + 1)
    assert held is not None and held.state is State.ATTEMPTING and held.fence == 1
    assert held.delivered == (ref,) and held.owner == holder.owner and not held.penalty
    assert held.next_attempt_at is None and held.updated_at == NOW + 1
    await harness.kill(holder)  # looks dead (a lease that lapsed): another process recovers it
    assert await mine.claim(row.id, fence=1, now=NOW + 2) is not None
    assert await holder.prove_claim(row.id, fence=1, now=NOW + 3) is None


async def test_scopes_filter_profiles_platforms_due_and_owner(harness: Any) -> None:
    mine = await harness.store(me=True)
    gone = await harness.store()
    rows = {}
    for index, (name, profile, platform) in enumerate(
        [("a", "X", "slack"), ("b", "Y", "discord"), ("c", "Z", "slack"), ("d", "X", "slack")]
    ):
        rows[name], _ = await gone.record(
            reply(name, profile=profile, platform=platform), now=NOW + index
        )
    own, _ = await mine.record(reply("e"), now=NOW + 10)
    # "d" failed with a rate limit and waits out a 60 s penalty; then its owner dies.
    assert await gone.claim(rows["d"].id, fence=0, now=NOW) is not None
    assert await gone.settle(
        rows["d"].id,
        fence=1,
        state=State.FAILED,
        now=NOW,
        next_attempt_at=NOW + 60,
        penalty=True,
    )
    await harness.kill(gone)
    found = await mine.candidates(dead_scope(), now=NOW + 20)
    assert [r.id for r in found] == [rows["a"].id, rows["b"].id]  # Z is not served; d waits
    found = await mine.candidates(dead_scope(platforms=("slack",)), now=NOW + 20)
    assert [r.id for r in found] == [rows["a"].id]
    found = await mine.candidates(dead_scope(), now=NOW + 100)
    assert [r.id for r in found] == [rows["a"].id, rows["b"].id, rows["d"].id]
    found = await mine.candidates(dead_scope(owners="mine"), now=NOW + 100)
    assert [r.id for r in found] == [own.id]
    found = await mine.candidates(dead_scope(owners="mine", due="due"), now=NOW + 100)
    assert found == []  # my own pending row has no timer: its submitter sends it
    found = await mine.candidates(dead_scope(owners="mine_or_dead"), now=NOW + 100)
    assert len(found) == 4
    page = await mine.candidates(dead_scope(limit=1), now=NOW + 100)
    rest = await mine.candidates(dead_scope(after=(page[0].created_at, page[0].id)), now=NOW + 100)
    assert [r.id for r in page + rest] == [rows["a"].id, rows["b"].id, rows["d"].id]
    penalty = await mine.candidates(
        dead_scope(states=(State.FAILED,), due="not_waiting_penalty"), now=NOW + 20
    )
    assert penalty == []
    penalty = await mine.candidates(
        dead_scope(states=(State.FAILED,), due="not_waiting_penalty"), now=NOW + 100
    )
    assert [r.id for r in penalty] == [rows["d"].id]


async def test_abandon_retry_purge_prune_counts(harness: Any) -> None:
    store = await harness.store(me=True)
    a, _ = await store.record(reply("a"), now=NOW)
    b, _ = await store.record(reply("b", channel="C2"), now=NOW + 1)
    c, _ = await store.record(reply("c"), now=NOW + 2)
    abandoned = await store.abandon(a.id, fence=0, now=NOW + 3, reason="too old")
    assert abandoned is not None and abandoned.state is State.ABANDONED
    assert abandoned.fence == 1 and abandoned.last_error == "too old"
    assert await store.abandon(a.id, fence=0, now=NOW + 3, reason="again") is None
    await store.claim(b.id, fence=0, now=NOW + 4)
    await store.settle(b.id, fence=1, state=State.DELIVERED, now=NOW + 4)
    counts = await store.counts_by_state()
    assert counts[State.ABANDONED] == 1 and counts[State.DELIVERED] == 1
    assert counts[State.PENDING] == 1 and counts[State.ATTEMPTING] == 0
    assert (await store.counts_by_state(profiles={"nobody"}))[State.PENDING] == 0
    listed = await store.rows(states={State.ABANDONED, State.PENDING})
    assert [r.id for r in listed] == [c.id, a.id]  # newest first
    assert [r.id for r in await store.rows(channel="C2")] == [b.id]
    assert [r.id for r in await store.rows(created_before=NOW + 0.5)] == [a.id]
    assert [r.id for r in await store.rows(created_after=NOW + 1.5)] == [c.id]
    retried = await store.retry(a.id, now=NOW + 10)
    assert retried is not None and retried.state is State.PENDING and retried.owner is None
    assert retried.fence == 2 and retried.resends == 0 and retried.created_at == NOW + 10
    assert await store.retry(c.id, now=NOW) is None  # only abandoned rows
    assert await store.purge(states={State.PENDING}) == 0  # never purges open rows
    assert await store.prune(delivered_before=NOW + 4) == 0
    assert await store.prune(delivered_before=NOW + 5) == 1
    await store.abandon(c.id, fence=0, now=NOW, reason="x")
    assert await store.purge(states={State.ABANDONED}) == 1
    assert await store.get(b.id) is None and await store.get(c.id) is None


async def test_key_value_store_beside_the_ledger(harness: Any) -> None:
    store = await harness.store(me=True)
    kv = key_value_store(store)
    assert await kv.get("teams", "ref:1") is None
    await kv.put("teams", "ref:1", b"\x00abc")
    await kv.put("slack", "ref:1", b"other")
    assert await kv.get("teams", "ref:1") == b"\x00abc"
    await kv.put("teams", "ref:1", b"new")
    assert await kv.get("teams", "ref:1") == b"new"
    await kv.delete("teams", "ref:1")
    await kv.delete("teams", "ref:1")
    assert await kv.get("teams", "ref:1") is None
    assert await kv.get("slack", "ref:1") == b"other"
    with pytest.raises(ValueError, match="must not be empty"):
        await kv.put("", "k", b"v")


async def test_dead_owners_names_a_killed_owner_and_never_a_live_one(harness: Any) -> None:
    victim = await harness.store()
    alive = await harness.store()
    store = await harness.store(me=True)
    await victim.record(reply("d1"), now=NOW)
    await alive.record(reply("d2"), now=NOW)
    assert victim.owner not in await store.dead_owners()
    await harness.kill(victim)
    dead = await store.dead_owners()
    assert victim.owner in dead
    assert alive.owner not in dead and store.owner not in dead


async def test_claim_many_and_mark_delivered_keep_each_rows_compare_and_swap(harness: Any) -> None:
    """A sweep's page claim and its settles: each item is the single-row call's compare-and-swap,
    one result per item in order, the same id twice in one call winning once."""
    store = await harness.store(me=True)
    a, _ = await store.record(reply("a"), now=NOW)
    b, _ = await store.record(reply("b"), now=NOW)
    c, _ = await store.record(reply("c"), now=NOW)
    assert await store.claim(c.id, fence=0, now=NOW) is not None  # c's fence moved on
    held = await store.claim_many([(a.id, 0), (c.id, 0), (b.id, 0), (a.id, 0)], now=NOW + 1)
    assert [row is not None for row in held] == [True, False, True, False]
    assert held[0] == await store.get(a.id) and held[2] == await store.get(b.id)
    assert held[0] is not None and (held[0].state, held[0].fence) == (State.ATTEMPTING, 1)
    ref = MessageRef("C1", "100", "T1")
    settled = await store.mark_delivered([(a.id, 1, ref), (b.id, 0, ref)], now=NOW + 2)
    assert settled == [True, False]  # b is held at fence 1, not 0
    done = await store.get(a.id)
    assert done is not None and done.state is State.DELIVERED and done.delivered == (ref,)
    still = await store.get(b.id)
    assert still is not None and still.state is State.ATTEMPTING and still.delivered == ()
    assert (
        await store.claim_many([], now=NOW) == [] and await store.mark_delivered([], now=NOW) == []
    )


async def test_mark_delivered_keeps_each_ref_with_or_without_its_thread(harness: Any) -> None:
    """The settles of one call, refs with a thread and without, each row settled at its own
    fence with its own ref (SQLite puts the two kinds in statements of their own)."""
    store = await harness.store(me=True)
    rows = [(await store.record(reply(f"t{index}"), now=NOW))[0] for index in range(4)]
    held = await store.claim_many([(row.id, 0) for row in rows], now=NOW + 1)
    assert all(row is not None for row in held)
    refs = [
        MessageRef("C1", "m0", "T0"),
        MessageRef("C1", "m1"),
        MessageRef("C2", "m2", "T2"),
        MessageRef("C2", "m3"),
    ]
    fences = [1, 1, 0, 1]  # the third is held at fence 1: its settle misses
    items = [(row.id, fence, ref) for row, fence, ref in zip(rows, fences, refs, strict=True)]
    assert await store.mark_delivered(items, now=NOW + 2) == [True, True, False, True]
    for row, ref, fence in zip(rows, refs, fences, strict=True):
        now = await store.get(row.id)
        assert now is not None
        if fence:
            assert (now.state, now.delivered, now.updated_at) == (State.DELIVERED, (ref,), NOW + 2)
        else:
            assert (now.state, now.delivered) == (State.ATTEMPTING, ())


async def test_a_sweeps_claims_and_settles_of_more_rows_than_one_statement(harness: Any) -> None:
    """150 rows (PostgreSQL: three statements of 64, sent in one pipeline): each item keeps its
    own compare-and-swap and its result's place, a repeated id and a stale fence included."""
    store = await harness.store(me=True)
    rows = [(await store.record(reply(f"many{index}"), now=NOW))[0] for index in range(150)]
    assert await store.claim(rows[70].id, fence=0, now=NOW) is not None  # its fence moved on
    items = [(row.id, 0) for row in rows] + [(rows[3].id, 0)]
    held = await store.claim_many(items, now=NOW + 1)
    assert [index for index, row in enumerate(held) if row is None] == [70, 150]
    assert all(row is not None and row.id == rows[i].id for i, row in enumerate(held[:70]))
    settles = [(row.id, 1, MessageRef("C1", f"m{index}")) for index, row in enumerate(rows)]
    settles[20] = (rows[20].id, 0, MessageRef("C1", "stale"))  # held at fence 1, not 0
    settled = await store.mark_delivered(settles, now=NOW + 2)
    # row 70 was claimed by the single claim at fence 0 -> 1: its settle at fence 1 holds too
    assert [index for index, ok in enumerate(settled) if not ok] == [20]
    done = await store.get(rows[149].id)
    assert done is not None and done.delivered == (MessageRef("C1", "m149"),)


async def test_a_page_read_then_claimed_is_the_row_as_stored(harness: Any) -> None:
    """Rows a sweep's page read, claimed by ``claim_many``: what comes back is the row as the
    store now holds it (SQLite and PostgreSQL build it from the row as read), a failed row's
    resend counted; a row whose id was purged and recorded again at the same fence is never
    returned with the older life's content."""
    mine = await harness.store(me=True)
    other = await harness.store()
    fresh, _ = await other.record(reply("p1"), now=NOW)
    failed, _ = await other.record(reply("p2"), now=NOW)
    gone, _ = await other.record(reply("p3", text="first life"), now=NOW)
    held = await other.claim(failed.id, fence=0, now=NOW)
    assert held is not None
    await other.settle(failed.id, fence=1, state=State.FAILED, now=NOW, last_error="boom")
    await harness.kill(other)
    page = await mine.candidates(dead_scope(), now=NOW + 1)
    assert {row.id for row in page} == {fresh.id, failed.id, gone.id}
    # meanwhile the third is claimed, delivered, purged and recorded again: fence 0 again
    again = await mine.claim(gone.id, fence=0, now=NOW + 1)
    assert again is not None
    await mine.settle(gone.id, fence=1, state=State.DELIVERED, now=NOW + 1)
    assert await mine.purge(states={State.DELIVERED}) == 1
    await mine.record(reply("p3", text="second life"), now=NOW + 2)
    items = [(row.id, row.fence) for row in page]
    claimed = await mine.claim_many(items, now=NOW + 3)
    by_id = dict(zip([row.id for row in page], claimed, strict=True))
    for oid in (fresh.id, failed.id):
        row = by_id[oid]
        assert row is not None and row == await mine.get(oid)
        assert (row.state, row.owner, row.updated_at) == (State.ATTEMPTING, mine.owner, NOW + 3)
    assert by_id[failed.id] is not None and by_id[failed.id].resends == 1  # type: ignore[union-attr]
    assert by_id[failed.id].last_error == "boom"  # type: ignore[union-attr]
    second = by_id[gone.id]
    assert second is None or second == await mine.get(gone.id)
    assert second is None or second.text == "second life"
