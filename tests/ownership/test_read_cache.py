"""The read cache of the SQLite log: a file read that races this handle's own commit must not
make the commit look like another writer's (ADR 0178)."""

from __future__ import annotations

from bridge_core.conversation import Turn
from bridge_core.ownership.read_cache import ReadCache


def turns(*seqs: int) -> list[Turn]:
    return [Turn("C", "C/u/a", seq, float(seq), f"m{seq}", "a", "hi") for seq in seqs]


def seqs(records: list[Turn] | None) -> list[int] | None:
    return None if records is None else [record.seq for record in records]


def test_a_file_read_that_found_our_commit_first_is_not_another_writer() -> None:
    cache = ReadCache(poll_interval=1.0)
    cache.wrote(0, turns(1, 2), now=0.0)
    # the cache went stale; a reader read the file and found the commit whose callback is due
    cache.fetched(2, turns(3, 4), complete=True, now=5.0)
    cache.wrote(2, turns(3, 4), now=5.1)
    cache.wrote(4, turns(5), now=5.2)
    assert seqs(cache.read(0, 100, now=5.3)) == [1, 2, 3, 4, 5]
    assert cache.read(5, 100, now=5.3) == []  # nothing newer, from the cache: still fresh


def test_a_stale_file_read_keeps_what_our_commit_added_meanwhile() -> None:
    cache = ReadCache(poll_interval=1.0)
    cache.wrote(0, turns(1, 2), now=0.0)
    cache.wrote(2, turns(3, 4), now=5.0)  # committed while the file was being read
    cache.fetched(2, [], complete=True, now=5.1)  # the read saw the log before that commit
    assert seqs(cache.read(2, 100, now=5.2)) == [3, 4]
    cache.wrote(4, turns(5), now=5.3)
    assert cache.read(5, 100, now=5.4) == []


def test_a_read_behind_or_beyond_the_run_does_not_move_it() -> None:
    cache = ReadCache(poll_interval=1.0)
    cache.fetched(10, turns(11, 12), complete=True, now=0.0)
    cache.fetched(5, turns(6, 7), complete=False, now=0.1)  # a reader catching up
    cache.fetched(20, turns(21), complete=True, now=0.2)  # a reader ahead of the run
    assert cache.read(5, 100, now=0.3) is None  # before the run: the file
    assert seqs(cache.read(10, 100, now=0.3)) == [11, 12]
    cache.wrote(12, turns(13), now=0.4)
    assert seqs(cache.read(12, 100, now=0.5)) == [13]
    assert cache.read(13, 100, now=0.5) == []


def test_another_writers_records_between_ours_are_still_noticed() -> None:
    cache = ReadCache(poll_interval=1.0)
    cache.wrote(0, turns(1, 2), now=0.0)
    cache.wrote(4, turns(5), now=0.1)  # 3 and 4 were appended by someone else
    assert cache.read(2, 100, now=0.2) is None
    cache.fetched(2, turns(3, 4, 5), complete=True, now=0.3)
    assert seqs(cache.read(2, 100, now=0.4)) == [3, 4, 5]
    assert cache.read(5, 100, now=0.4) is None  # another writer: always asked of the file
