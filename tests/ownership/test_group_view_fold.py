"""GroupView, the pure fold: every member computes the same decisions from the same records."""

from __future__ import annotations

import itertools
import random

from bridge_core.conversation import Frame, Join, Leave, LeaveReason, LogRecord, Turn
from bridge_core.ownership import GroupView

CH = "C"


class Log:
    """Builds records with increasing seq and time."""

    def __init__(self) -> None:
        self.seq = itertools.count(1)
        self.t = 100.0
        self.records: list[LogRecord] = []

    def _next(self, dt: float) -> tuple[int, float]:
        self.t += dt
        return next(self.seq), self.t

    def join(self, member: str, settle: float = 1.0, dt: float = 0.01) -> Join:
        seq, at = self._next(dt)
        record = Join(CH, seq, at, member, at + settle)
        self.records.append(record)
        return record

    def leave(self, member: str, reason: LeaveReason = LeaveReason.EXPIRED) -> Leave:
        seq, at = self._next(0.01)
        record = Leave(CH, seq, at, member, reason)
        self.records.append(record)
        return record

    def turn(self, author: str, dt: float = 0.01) -> Turn:
        seq, at = self._next(dt)
        record = Turn(CH, f"{CH}/u/{author}", seq, at, f"m{seq}", author, "hi")
        self.records.append(record)
        return record

    def frame(self, turn: Turn, member: str) -> Frame:
        seq, at = self._next(0.01)
        record = Frame(CH, turn.conversation, seq, at, turn.seq, member, f"o{turn.seq}")
        self.records.append(record)
        return record


def fold(me: str | None, records: list[LogRecord]) -> tuple[GroupView, list[Turn]]:
    view = GroupView(me=me)
    return view, view.apply_all(records)


def test_every_member_decides_alike_over_a_random_history() -> None:
    rng = random.Random(5)
    log = Log()
    present: list[str] = []
    names = (f"m{i}" for i in itertools.count())
    for _ in range(800):
        action = rng.random()
        if action < 0.05 or len(present) < 2:
            member = next(names)
            log.join(member, settle=rng.choice([0.0, 0.5, 2.0]))
            present.append(member)
        elif action < 0.08:
            log.leave(present.pop(rng.randrange(len(present))))
        else:
            log.turn(f"user{rng.randrange(40)}", dt=rng.random() * 0.2)
    everyone = sorted({r.member for r in log.records if isinstance(r, Join)})
    views = {}
    deliverers: dict[int, list[str]] = {}
    for member in everyone:
        view, turns = fold(member, log.records)
        views[member] = view
        for turn in turns:
            deliverers.setdefault(turn.seq, []).append(member)
    # every member ends with the same assignment of every pending turn
    observer, _ = fold(None, log.records)
    conversations = {r.conversation for r in log.records if isinstance(r, Turn)}
    for view in views.values():
        for conversation in conversations:
            assert view.pending(conversation) == observer.pending(conversation)
    assert set(observer.members) == set(present)
    # no frames were written, so every turn is pending, assigned to a present member, and was
    # delivered by it; a turn went to an earlier member only if that member left since
    for turn in (r for r in log.records if isinstance(r, Turn)):
        [(_, owner)] = [p for p in observer.pending(turn.conversation) if p[0] == turn]
        assert owner in present
        assert deliverers[turn.seq][-1] == owner or owner in deliverers[turn.seq]
        assert sum(1 for m in deliverers[turn.seq] if m in present) == 1


def test_a_frame_settles_only_the_turn_it_answers() -> None:
    log = Log()
    log.join("a", settle=0.0)
    log.join("b", settle=0.0)
    view, _ = fold("b", log.records)
    author = next(f"u{i}" for i in range(100) if view.owner(f"{CH}/u/u{i}", 1e9) == "a")
    t1, t2, t3 = log.turn(author), log.turn(author), log.turn(author)
    log.frame(t2, "a")
    view, delivered = fold("b", log.records)
    assert delivered == []
    assert [t.seq for t, owner in view.pending(t1.conversation)] == [t1.seq, t3.seq]
    # a's leave hands b the unanswered t1 and t3, never the answered t2
    log.leave("a")
    _, delivered = fold("b", log.records)
    assert [t.seq for t in delivered] == [t1.seq, t3.seq]


def test_a_takeover_of_older_turns_after_answering_a_newer_one_loses_nothing() -> None:
    """The soak found it: b owned t3 and answered it after taking over a's t1 and t2; those
    must stay pending until b answers them too (b's later leave hands them on)."""
    log = Log()
    for member in ("a", "b", "c"):
        log.join(member, settle=0.0)
    view, _ = fold(None, log.records)
    author = next(
        f"u{i}"
        for i in range(1000)
        if view.owner(f"{CH}/u/u{i}", 1e9) == "a"
        and GroupView(me=None, members={"b": 0.0, "c": 0.0}).owner(f"{CH}/u/u{i}", 1e9) == "b"
    )
    t1, t2 = log.turn(author), log.turn(author)
    log.leave("a")  # b takes over t1 and t2
    t3 = log.turn(author)  # b owns it
    log.frame(t3, "b")
    log.leave("b", LeaveReason.GRACEFUL)  # before it handled t1 and t2
    _, by_c = fold("c", log.records)
    assert by_c == [t1, t2]


def test_a_frame_by_a_non_owner_settles_only_the_turn_it_answers() -> None:
    log = Log()
    log.join("a", settle=0.0)
    log.join("b", settle=0.0)
    view, _ = fold(None, log.records)
    author = next(f"u{i}" for i in range(100) if view.owner(f"{CH}/u/u{i}", 1e9) == "a")
    t1, t2 = log.turn(author), log.turn(author)
    log.frame(t2, "b")  # an in-flight answer by a former owner
    view, _ = fold(None, log.records)
    assert [t.seq for t, _owner in view.pending(t1.conversation)] == [t1.seq]


def test_takeover_chains_through_successive_departures() -> None:
    log = Log()
    for member in ("a", "b", "c"):
        log.join(member, settle=0.0)
    view, _ = fold(None, log.records)
    author = next(
        f"u{i}"
        for i in range(1000)
        if view.owner(f"{CH}/u/u{i}", 1e9) == "a"
        and GroupView(me=None, members={"b": 0.0, "c": 0.0}).owner(f"{CH}/u/u{i}", 1e9) == "b"
    )
    turn = log.turn(author)
    log.leave("a")  # b takes it over ...
    log.leave("b")  # ... and dies before answering: c takes it over
    _, by_b = fold("b", log.records)
    _, by_c = fold("c", log.records)
    assert by_b == [turn] and by_c == [turn]


def test_orphans_go_to_the_next_joiner() -> None:
    log = Log()
    log.join("a", settle=0.0)
    turn = log.turn("x")
    log.leave("a")
    lonely = log.turn("y")  # nobody present at all
    log.join("b", settle=1.0)
    view, delivered = fold("b", log.records)
    assert delivered == [turn, lonely]
    assert view.statistics().orphans_adopted == 2


def test_a_departed_member_delivers_nothing_more() -> None:
    log = Log()
    log.join("a", settle=0.0)
    log.leave("a", LeaveReason.GRACEFUL)
    log.turn("x")
    view, delivered = fold("a", log.records)
    assert delivered == [] and view.left and not view.joined


def test_a_takeover_of_many_conversations_touches_only_the_departed() -> None:
    log = Log()
    for member in ("a", "b", "c", "d"):
        log.join(member, settle=0.0)
    for i in range(2000):
        log.turn(f"user{i}", dt=0.0001)
    view, _ = fold("b", log.records)
    a_conversations = view.pending_conversations("a")
    delivered = view.apply(log.leave("a"))
    assert delivered and {t.conversation for t in delivered} <= a_conversations
    assert view.statistics().taken_over == len({t.conversation for t in delivered})
