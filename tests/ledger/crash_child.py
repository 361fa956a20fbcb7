"""A gateway-shaped child process for the crash tests: the shipped ledger and store, sending
replies to a "platform" that appends every send to a file.

Run by ``crash_harness.py`` (killed with SIGKILL at random points, then started again).

- ``serve``: boot sweep, then record-and-send replies ``--first``, ``--first + 1``, ... with
  ``--concurrency`` at once, forever (until killed).
- ``drain``: boot sweep, then serve timers until no row is open; exit 0 when every row is final,
  3 when some are left to the next start (the harness starts it again).

``--paced``: the channel takes one send at a time (a lock, like a paced sender's lane) and the
ledger claims each reply when its turn comes (``deliver_begins=True``), so most replies wait
``pending`` behind the lane; ``--claim-before-turn`` claims before the wait instead (to see the
difference: their resends after a kill are then labelled).

``--sender RATE``: the replies go through the shipped ``ChannelSender`` on a budget of RATE sends
a second (burst 1), exactly as the gateway sends them (``Post(text, begin=delivery.begin)``), to a
provider that appends to the file; the ledger claims at the turn. The sender's own handling of the
scripted errors applies (it waits out a rate limit itself, and backs off after a transport error,
20 times shorter than in production: ``QuickBackoffSender``); a scripted ``Unreachable`` is sent as
``MessageRejected`` there, which ends that reply alone rather than the whole channel.

``--skew SECONDS``: this process's wall clock (``time.time``) runs that far behind, as a host's
whose clock is wrong; the delivery file's times stay true.

A PostgreSQL child appends ``clock`` with ``bound``, how far its estimate of the database clock
(which stamps the rows) may be off, each time that changes (see ``report_clock_bound``).

A reply whose claim was lost at its turn appends ``lost``; in ``--sender`` mode a claim that
returned appends ``claimed``. Each send appends ``start`` (when the
send begins) and, ``--send-delay`` later, ``sent`` (the platform has it) as one JSON line each,
written with a single ``os.write`` on an O_APPEND file, so a kill rarely leaves half a line (only
a write across a page boundary of the file can be cut; ``crash_harness.read_sends`` drops such a
fragment). Some replies are scripted to fail (see ``scripted_error``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

REAL_TIME = time.time  # the delivery file's clock, whatever --skew does to time.time
if "--skew" in sys.argv:
    # Before anything else is imported, so every time.time() the process makes (a default
    # argument bound at import included) reads the wrong clock, as on a host whose clock is off.
    _SKEW = float(sys.argv[sys.argv.index("--skew") + 1])
    time.time = lambda: REAL_TIME() - _SKEW

from dataclasses import replace  # noqa: E402
from typing import Any  # noqa: E402

import anyio  # noqa: E402

from bridge_core.ledger import (  # noqa: E402
    ClaimLost,
    Delivery,
    DeliveryLedger,
    Reply,
    Schedule,
    State,
    open_store,
)
from bridge_core.provider import (  # noqa: E402
    Capabilities,
    ChatProvider,
    MessageRef,
    MessageRejected,
    ProviderError,
    RateLimited,
    SendBudget,
    TransportError,
    Unreachable,
)
from bridge_core.sending import ChannelSender, Post  # noqa: E402

SCHEDULE = Schedule(
    resend_delays=(0.05, 0.1),
    max_resends=3,
    freshness=3600.0,
    default_penalty=0.02,
    sweep_interval=0.1,
    concurrency=16,
)


def index_of(obligation: str) -> int:
    # obligation ids are "len:profile|len:channel|len:r<index>|0"
    return int(obligation.split("|")[2].split(":")[1][1:])


def chunks_for(index: int) -> tuple[str, ...]:
    if index % 7 == 1:
        return (f"r{index} part 1", f"r{index} part 2", f"r{index} part 3")
    return ()


def scripted_error(delivery: Delivery) -> ProviderError | None:
    """The platform's answers, decided by the reply's index and the claim's attempt number."""
    index = index_of(delivery.obligation_id)
    if index % 23 == 5:
        return Unreachable("channel_not_found")
    if index % 13 == 3 and delivery.attempt == 1:
        return TransportError("503 from the platform")
    if index % 11 == 7 and delivery.attempt <= 2:
        return RateLimited("ratelimited", retry_after=0.02)
    if index % 14 == 1 and delivery.part == 1 and delivery.attempt == 1:
        return TransportError("timeout on part 2")
    return None


class AppendingPlatform:
    def __init__(self, path: str, delay: float, *, paced: bool) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.delay = delay
        self.lane = anyio.Lock() if paced else None
        self.pid = os.getpid()
        self.count = 0

    def _line(self, event: str, delivery: Delivery) -> None:
        record = {
            "ev": event,
            "id": delivery.obligation_id,
            "part": delivery.part,
            "parts": delivery.parts,
            "fence": delivery.fence,
            "attempt": delivery.attempt,
            "marked": delivery.marker is not None,
            "text": delivery.text,
            "pid": self.pid,
            "t": REAL_TIME(),
        }
        os.write(self.fd, (json.dumps(record, ensure_ascii=False) + "\n").encode())

    def clock_line(self, bound: float) -> None:
        record = {"ev": "clock", "bound": bound, "pid": self.pid, "t": REAL_TIME()}
        os.write(self.fd, (json.dumps(record) + "\n").encode())

    async def deliver(self, delivery: Delivery) -> MessageRef:
        if self.lane is None:
            return await self._send(delivery)
        async with self.lane:  # the channel's turn: the other replies wait here
            try:
                await delivery.begin()
            except ClaimLost:
                self._line("lost", delivery)  # another process took the row while it waited
                raise
            return await self._send(delivery)

    async def _send(self, delivery: Delivery) -> MessageRef:
        self._line("start", delivery)
        await anyio.sleep(self.delay)
        error = scripted_error(delivery)
        if error is not None:
            raise error
        self._line("sent", delivery)
        self.count += 1
        return MessageRef(delivery.channel, f"{self.pid}-{self.count}", delivery.thread)


BACKOFF_SCALE = 0.05


class QuickBackoffSender(ChannelSender):
    """The shipped sender, its back-off after a transport error (1-2 s at first, the product's
    ``BACKOFF_MIN``, not configurable) 20 times shorter: the scripted 503s would otherwise hold
    the lane some 1.5 s each, most of this test's time, and the length of the pause is not what
    it checks (a reply is claimed only when its slot comes, pause or not)."""

    def _backoff(self) -> float:
        return super()._backoff() * BACKOFF_SCALE


class SenderPlatform(ChatProvider):
    """The file platform behind a real ``ChannelSender``: each post is matched to its delivery by
    its text (a process never sends one reply twice at once), so the scripted answers apply."""

    name = "file"
    capabilities = Capabilities(edit=False, max_length=4000, probe=False)

    def __init__(self, platform: AppendingPlatform, rate: float) -> None:
        self.platform = platform
        self.sender = QuickBackoffSender(
            self, channel="C1", budget=SendBudget(burst=1, per_second=rate, edit_spacing=0.0)
        )
        self.waiting: dict[str, Delivery] = {}
        self.limited: set[tuple[str, int, int]] = set()

    async def deliver(self, delivery: Delivery) -> MessageRef:
        self.waiting[delivery.text] = delivery
        claimed = False

        async def begin() -> None:
            nonlocal claimed
            await delivery.begin()
            if not claimed:  # the claim returned: from here nothing is awaited until the post
                claimed = True
                self.platform._line("claimed", delivery)

        try:
            return await self.sender.send(Post(delivery.text, begin=begin))
        finally:
            self.waiting.pop(delivery.text, None)

    async def post(self, channel: str, text: str, *, thread: str | None = None) -> MessageRef:
        delivery = self.waiting[text]
        platform = self.platform
        platform._line("start", delivery)
        await anyio.sleep(platform.delay)
        error = scripted_error(delivery)
        if isinstance(error, Unreachable):
            error = MessageRejected(str(error))
        if isinstance(error, RateLimited):
            # the sender waits it out and sends again under the same claim: refuse once only
            key = (delivery.obligation_id, delivery.part, delivery.attempt)
            error = None if key in self.limited else error
            self.limited.add(key)
        if error is not None:
            raise error
        platform._line("sent", delivery)
        platform.count += 1
        return MessageRef(channel, f"{platform.pid}-{platform.count}", thread)

    async def edit(self, ref: MessageRef, text: str) -> MessageRef:
        raise NotImplementedError


def report_clock_bound(store: Any, platform: AppendingPlatform) -> None:
    """A PostgreSQL store stamps rows with its estimate of the database clock, taken from the
    quickest of its recent lease renewals and off by at most half that round trip (ADR 0018).
    A process's first estimate rests on one renewal: on a loaded host that round trip can last
    hundreds of ms, the process being descheduled between the server's reply and its reading of
    the clock. Append the bound at the open and after each renewal that changes it, so the
    checks know how far each stamp may be from the true time."""
    samples = getattr(store, "_clock_samples", None)
    if samples is None:
        return  # SQLite: rows carry this host's own clock
    renew = store.renew
    written: list[float] = []

    def write() -> None:
        bound = min(store._clock_samples)[0] / 2
        if not written or written[-1] != bound:
            written.append(bound)
            platform.clock_line(bound)

    async def renew_and_report() -> None:
        await renew()
        write()

    store.renew = renew_and_report  # DeliveryLedger.run reads store.renew when it starts
    write()


def phase(path: str, name: str) -> None:
    with open(path, "w", encoding="ascii") as file:
        file.write(name)


async def main(args: argparse.Namespace) -> int:
    store = await open_store(
        args.ledger,
        table_prefix=args.prefix,
        lease=args.lease or 60.0,
        sqlite_writer=args.sqlite_writer,
    )
    platform = AppendingPlatform(args.out, args.send_delay, paced=args.paced)
    report_clock_bound(store, platform)
    paced = SenderPlatform(platform, args.sender) if args.sender else None
    ledger = DeliveryLedger(
        store,
        deliver=platform.deliver if paced is None else paced.deliver,
        profiles={"X"},
        schedule=SCHEDULE if not args.sweep else replace(SCHEDULE, sweep_interval=args.sweep),
        deliver_begins=(args.paced or paced is not None) and not args.claim_before_turn,
    )
    async with anyio.create_task_group() as group:
        if paced is not None:
            group.start_soon(paced.sender.run)
        phase(args.phase, "boot")
        await ledger.boot_sweep()
        phase(args.phase, args.mode)
        await group.start(ledger.run)
        if args.mode == "drain":
            code = await drain(ledger)
            group.cancel_scope.cancel()
            await store.aclose()
            return code
        limiter = anyio.Semaphore(args.concurrency)

        async def submit(index: int) -> None:
            try:
                await ledger.submit(
                    Reply.answering(
                        profile="X",
                        platform="console",
                        channel="C1",
                        answers=f"r{index}",
                        text=f"reply r{index}",
                        chunks=chunks_for(index),
                    )
                )
            except Exception:
                # Not recorded (the database ended a session this process stalled in): a
                # gateway answers such a request with an error, and the checks only follow
                # replies the ledger holds.
                pass
            finally:
                limiter.release()

        index = args.first
        while args.last is None or index <= args.last:
            await limiter.acquire()
            group.start_soon(submit, index)
            index += 1
    return 0


async def drain(ledger: DeliveryLedger) -> int:
    """Serve timers until nothing is open; 3 when rows are left for the next start."""
    store = ledger.store
    while True:
        # One query, so a row cannot move between two looks (failed -> attempting).
        open_rows = await store.rows(
            states={State.PENDING, State.ATTEMPTING, State.FAILED}, limit=100_000
        )
        if not open_rows:
            return 0
        if all(row.state is State.FAILED and row.next_attempt_at is None for row in open_rows):
            return 3
        await anyio.sleep(0.05)


def cli(argv: list[str]) -> int:
    """Parse ``argv`` (the arguments after the script's name) and run; the exit code."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--ledger", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--phase", required=True)
    parser.add_argument("--mode", choices=("serve", "drain"), default="serve")
    parser.add_argument("--first", type=int, default=0)
    parser.add_argument("--last", type=int, default=None)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--send-delay", type=float, default=0.005)
    parser.add_argument("--prefix", default="bridge_")
    parser.add_argument("--lease", type=float, default=0.0)
    parser.add_argument("--paced", action="store_true")
    parser.add_argument("--claim-before-turn", action="store_true")
    parser.add_argument("--sender", type=float, default=0.0, help="send through a ChannelSender")
    parser.add_argument("--skew", type=float, default=0.0, help="run time.time this far behind")
    parser.add_argument("--sweep", type=float, default=0.0, help="the periodic sweep's interval")
    parser.add_argument("--sqlite-writer", choices=("thread", "process"), default="thread")
    args = parser.parse_args(argv)
    if args.skew and time.time is REAL_TIME:
        # forked from crash_zygote.py, whose imports read the true clock: --skew needs a fresh
        # interpreter (crash_harness.start_child starts one for it)
        parser.error("--skew must be on the command line of a fresh interpreter")
    return anyio.run(main, args)


if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))
