"""Rendezvous hashing: golden vectors, spread, ties, and what a membership change moves."""

from __future__ import annotations

from collections import Counter

import pytest
import xxhash

from bridge_core.ownership import GroupView, member_seed, owner_of, score

# Pinned forever: every process of every version must compute these, or two versions of the
# gateway in one group would disagree on owners.
GOLDEN = [
    ("C1/u/alice", "gw-a", 8023272040256423965, 5513907827409233955),
    ("C1/u/alice", "gw-b", 7468159747508331599, 4698931202317780840),
    ("C1/t/1700000000.1234", "gw-a", 8023272040256423965, 10155189088232607201),
    ("", "x", 15279352496398831198, 17089342170995521460),
    ("é/ü", "m:1", 6361918396728013324, 16363395086158942271),
]


@pytest.mark.parametrize(("conversation", "member", "seed", "value"), GOLDEN)
def test_golden_vectors(conversation: str, member: str, seed: int, value: int) -> None:
    raw = member.encode()
    # the documented encoding, spelled out independently of the implementation
    assert xxhash.xxh3_64_intdigest(b"%d:%s" % (len(raw), raw)) == seed
    assert xxhash.xxh3_64_intdigest(conversation.encode(), seed) == value
    assert member_seed(member) == seed
    assert score(conversation, member) == value


def test_owner_is_the_highest_score_and_the_view_agrees() -> None:
    members = [f"gw-{i}" for i in range(16)]
    view = GroupView(me=None, members={m: 0.0 for m in members})
    for i in range(2000):
        conversation = f"C/u/user{i}"
        expected = max(members, key=lambda m: (score(conversation, m), m))
        assert owner_of(conversation, members) == expected
        assert view.owner(conversation, 1.0) == expected
    assert owner_of("C/u/x", []) is None


def test_ties_go_to_the_greater_member_id(monkeypatch: pytest.MonkeyPatch) -> None:
    import bridge_core.ownership.hashing as hashing
    import bridge_core.ownership.view as view_module

    monkeypatch.setattr(hashing, "_xxh3", lambda data, seed=0: 7)
    monkeypatch.setattr(view_module, "_xxh3", lambda data, seed=0: 7)
    assert owner_of("C/u/x", ["b", "c", "a"]) == "c"
    view = GroupView(me=None, members={"b": 0.0, "c": 0.0, "a": 0.0})
    assert view.owner("C/u/x", 1.0) == "c"


def test_load_spreads_evenly() -> None:
    members = [f"gw-{i}" for i in range(5)]
    view = GroupView(me=None, members={m: 0.0 for m in members})
    counts = Counter(view.owner(f"C/u/user{i}", 1.0) for i in range(100_000))
    for member in members:
        assert abs(counts[member] - 20_000) < 1_000, counts  # within 1% of the total


@pytest.mark.parametrize("n", [2, 4, 8])
def test_a_membership_change_moves_about_one_nth_and_no_others(n: int) -> None:
    conversations = [f"C/u/user{i}" for i in range(20_000)]
    members = {f"gw-{i}": 0.0 for i in range(n)}
    before = GroupView(me=None, members=members)
    owners = {c: before.owner(c, 1.0) for c in conversations}

    joined = GroupView(me=None, members={**members, "gw-new": 0.0})
    after_join = {c: joined.owner(c, 1.0) for c in conversations}
    moved = [c for c in conversations if after_join[c] != owners[c]]
    assert all(after_join[c] == "gw-new" for c in moved)  # only to the newcomer
    share = len(moved) / len(conversations)
    assert abs(share - 1 / (n + 1)) < 0.02, share

    remaining = dict(members)
    del remaining["gw-0"]
    left = GroupView(me=None, members=remaining)
    after_leave = {c: left.owner(c, 1.0) for c in conversations}
    moved = [c for c in conversations if after_leave[c] != owners[c]]
    assert all(owners[c] == "gw-0" for c in moved)  # only the departed's conversations
    assert len(moved) == sum(1 for c in conversations if owners[c] == "gw-0")
    assert abs(len(moved) / len(conversations) - 1 / n) < 0.02


def test_eligibility_and_the_none_eligible_fallback() -> None:
    view = GroupView(me=None, members={"a": 10.0, "b": 20.0})
    conversations = [f"C/u/user{i}" for i in range(200)]
    # before anyone is eligible, every present member counts
    assert {view.owner(c, 5.0) for c in conversations} == {"a", "b"}
    for c in conversations:
        assert view.owner(c, 5.0) == owner_of(c, ["a", "b"])
    # between the two sinces only a is eligible
    assert {view.owner(c, 15.0) for c in conversations} == {"a"}
    assert {view.owner(c, 20.0) for c in conversations} == {"a", "b"}
