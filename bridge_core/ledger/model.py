"""The ledger's records: a reply to deliver, its row, the delivery handed to ``deliver``.

A ``Reply`` is what the runtime asks the ledger to deliver; recording it creates an
``Obligation`` (the row). Each send of one part of it is a ``Delivery`` handed to the delivery
function the ledger was given. Nothing here does I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal

from bridge_core.conversation import obligation_id
from bridge_core.errors import BridgeError
from bridge_core.ledger.frozen import quick_init
from bridge_core.provider import MessageRef

__all__ = [
    "ClaimLost",
    "Deliver",
    "Delivery",
    "LedgerError",
    "LedgerWriter",
    "Obligation",
    "Owner",
    "Reply",
    "State",
    "part_delivery",
]


LedgerWriter = Literal["auto", "thread", "process"]
"""Where a SQLite ledger's record, claim and settle statements run: its writer thread, a writer
process of their own (ADR 0186), or ``"auto"``: the process, and the thread where it cannot
start (ADR 0187)."""


class LedgerError(BridgeError):
    """Base of the ledger's errors; raised itself when a store could not be opened or used (a bad
    URL, an unreadable file, a wrong schema)."""


class ClaimLost(LedgerError):
    """Raised by ``Delivery.begin()`` when the row was claimed elsewhere (or changed) while the
    reply waited for its turn: the delivery function lets it propagate and sends nothing."""


class State(enum.StrEnum):
    """A row's state. ``attempting`` lasts the whole send, so no other sweep can claim it."""

    PENDING = "pending"  # recorded; no send started (or a send was refused and is waiting)
    ATTEMPTING = "attempting"  # claimed: a send may be in flight
    DELIVERED = "delivered"  # every part acknowledged by the platform
    FAILED = "failed"  # the last send failed; waiting for a resend
    ABANDONED = "abandoned"  # never sent again: kept and visible

    @property
    def final(self) -> bool:
        return self in (State.DELIVERED, State.ABANDONED)


@dataclass(frozen=True, slots=True)
class Owner:
    """Who holds a row: one process, named by host, process id and process start time.

    The start time tells a reused process id from the process that stamped the row.
    """

    host: str
    pid: int
    started: str

    def __str__(self) -> str:
        return f"{self.host}|{self.pid}|{self.started}"

    @classmethod
    def parse(cls, text: str) -> Owner:
        host, _, rest = text.rpartition("|")
        host, _, pid = host.rpartition("|")
        if not host or not pid.isdigit():
            raise ValueError(f"not an owner id (host|pid|start): {text!r}")
        return cls(host=host, pid=int(pid), started=rest)


@quick_init  # built once a reply, on the event loop: see frozen.py
@dataclass(frozen=True, slots=True)
class Reply:
    """A final reply to deliver to one conversation, exactly as it must go out.

    ``chunks`` are the parts the runtime already cut for the platform (leave room for the
    recovery marker: ``marker_headroom(unit)`` in the platform's unit); empty means one part,
    ``text``.
    ``obligation_id`` is derived from what the reply answers (``Reply.answering``) or is a
    client's idempotency key: recording the same id twice is a no-op.
    ``partials`` are the messages a streamed reply already shows (one per part, in order): the
    final text of part ``i`` is delivered as an edit of ``partials[i]`` by the process that
    posted them, and as a new post otherwise (ADR 0090).
    """

    obligation_id: str
    profile: str
    platform: str
    channel: str
    text: str
    thread: str | None = None
    reply_to: str | None = None
    chunks: tuple[str, ...] = ()
    partials: tuple[MessageRef, ...] = ()

    def __post_init__(self) -> None:
        if not (self.obligation_id and self.profile and self.platform and self.channel):
            for name in ("obligation_id", "profile", "platform", "channel"):
                if not getattr(self, name):
                    raise ValueError(f"Reply.{name} must not be empty")
        if not self.chunks:
            _set_reply_chunks(self, (self.text,))

    @classmethod
    def answering(
        cls,
        *,
        profile: str,
        platform: str,
        channel: str,
        answers: str,
        text: str,
        index: int = 0,
        thread: str | None = None,
        reply_to: str | None = None,
        chunks: tuple[str, ...] = (),
        partials: tuple[MessageRef, ...] = (),
    ) -> Reply:
        """Reply ``index`` to the inbound message or turn ``answers`` (a derived, shared id)."""
        return cls(
            obligation_id=obligation_id(profile, channel, answers, index),
            profile=profile,
            platform=platform,
            channel=channel,
            text=text,
            thread=thread,
            reply_to=reply_to,
            chunks=chunks,
            partials=partials,
        )


# A one-part reply's chunks, stored through the slot's own descriptor (the class is frozen).
_set_reply_chunks = Reply.__dict__["chunks"].__set__


@quick_init  # built several times a reply: see frozen.py
@dataclass(frozen=True, slots=True)
class Obligation:
    """One ledger row.

    ``attempts`` counts claims (sends started); ``resends`` counts the resend budget spent (a
    rate-limit retry spends none); ``penalty`` says the row waits out a rate-limit penalty;
    ``delivered`` holds the refs of the parts acknowledged so far, in order; ``partials`` the
    streamed messages the reply's parts replace (``Reply.partials``).
    """

    id: str
    profile: str
    platform: str
    channel: str
    thread: str | None
    reply_to: str | None
    text: str
    chunks: tuple[str, ...]
    state: State
    attempts: int
    resends: int
    fence: int
    owner: str | None
    created_at: float
    updated_at: float
    next_attempt_at: float | None
    last_error: str | None
    penalty: bool = False
    delivered: tuple[MessageRef, ...] = field(default=())
    partials: tuple[MessageRef, ...] = field(default=())

    @property
    def reply(self) -> Reply:
        return Reply(
            obligation_id=self.id,
            profile=self.profile,
            platform=self.platform,
            channel=self.channel,
            text=self.text,
            thread=self.thread,
            reply_to=self.reply_to,
            chunks=self.chunks,
            partials=self.partials,
        )


@quick_init  # built several times a reply: see frozen.py
@dataclass(frozen=True, slots=True)
class Delivery:
    """One part of a reply, handed to the delivery function.

    ``text`` is what to post: the part, preceded by the recovery marker when this send may
    duplicate an earlier one. ``fence`` and ``attempt`` identify the claim this send belongs to.

    ``partial`` is the streamed message this part replaces, if any. ``poster_alive`` says this
    process posted it (it recorded the row): the part is then the final edit of ``partial``
    (a new post if that edit meets ``NotFound``). Otherwise the poster died mid-reply: the part
    is posted anew and ``partial`` is marked as interrupted (ADR 0090).
    """

    obligation_id: str
    profile: str
    platform: str
    channel: str
    thread: str | None
    reply_to: str | None
    body: str
    marker: str | None
    part: int
    parts: int
    fence: int
    attempt: int
    claim_on_begin: Callable[[], Awaitable[None]] | None = field(
        default=None, repr=False, compare=False
    )
    """What ``begin()`` runs: the row's claim, with a ledger built with ``deliver_begins=True``."""
    partial: MessageRef | None = None
    poster_alive: bool = False

    async def begin(self) -> None:
        """Await right before the platform call, after any wait for the channel's turn.

        With a ledger built with ``deliver_begins=True`` the row is claimed here, so a reply
        still waiting for its turn when the process dies goes out clean after the restart.
        Raises ``ClaimLost`` when another claimer got there first: send nothing then. Otherwise
        (the row was claimed before ``deliver`` was called) it does nothing.
        """
        if self.claim_on_begin is not None:
            await self.claim_on_begin()

    @property
    def key(self) -> str:
        """This part's idempotency key: the same on every send of it, in any process."""
        return f"{self.obligation_id}:{self.part}"

    @property
    def text(self) -> str:
        if self.marker is None:
            return self.body
        return f"{self.marker}\n{self.body}"


def part_delivery(
    row: Obligation,
    part: int,
    marker: str | None,
    claims: int,
    claim_on_begin: Callable[[], Awaitable[None]] | None,
    poster_alive: bool,
) -> Delivery:
    """Part ``part`` of ``row`` as a delivery. ``claims``: 1 when ``row`` is as it was before
    the claim this send belongs to (a claim still to be made in ``begin()``, or one a sweep
    made of the row as read, ADR 0176): a claim bumps the fence and the attempts by one and
    changes nothing else a delivery carries, so these are the claim's. 0 when the row as given
    is the claim's. Positional
    arguments, and Delivery built positionally: fifteen keywords cost twice the call, once a
    part of every reply and of every row a sweep sends."""
    return Delivery(
        row.id,
        row.profile,
        row.platform,
        row.channel,
        row.thread,
        row.reply_to,
        row.chunks[part],  # body
        marker,
        part,
        len(row.chunks),  # parts
        row.fence + claims,
        row.attempts + claims,
        claim_on_begin,
        row.partials[part] if part < len(row.partials) else None,  # partial
        poster_alive,
    )


Deliver = Callable[[Delivery], Awaitable[MessageRef]]
"""Sends one part and returns its ref; raises ``bridge_core.provider.ProviderError`` subclasses."""
