"""Rendezvous (highest-random-weight) hashing that is the same in every process.

The score of member ``m`` for conversation ``c`` is::

    seed(m)     = xxh3_64(b"%d:%s" % (len(m_utf8), m_utf8))
    score(c, m) = xxh3_64(c_utf8, seed=seed(m))

The member id enters only through the 64-bit seed and the conversation id is hashed on its own,
so no concatenation can make two different pairs encode alike. The seed is computed once per
member (at its join), which leaves one xxh3 call per member per decision. Ties (two equal 64-bit
scores) go to the greater member id, so every process picks the same owner.
"""

from __future__ import annotations

from collections.abc import Iterable

import xxhash

__all__ = ["member_seed", "owner_of", "score"]

_xxh3 = xxhash.xxh3_64_intdigest


def member_seed(member: str) -> int:
    """The per-member seed of the rendezvous score (length-prefixed UTF-8 of the id)."""
    raw = member.encode("utf-8")
    return _xxh3(b"%d:%s" % (len(raw), raw))


def score(conversation: str, member: str) -> int:
    """The rendezvous score of ``member`` for ``conversation`` (a 64-bit unsigned integer)."""
    return _xxh3(conversation.encode("utf-8"), member_seed(member))


def owner_of(conversation: str, members: Iterable[str]) -> str | None:
    """The member with the highest score for ``conversation``; ``None`` for no members.

    The reference implementation: ``GroupView`` computes the same answer with precomputed seeds.
    """
    best: tuple[int, str] | None = None
    for member in members:
        candidate = (score(conversation, member), member)
        if best is None or candidate > best:
            best = candidate
    return None if best is None else best[1]
