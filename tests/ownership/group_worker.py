"""One gateway process of the multi-process tests (run as a script, not collected).

It joins the channel's group on the log (Redis URL or SQLite path), admits its share of the
test's messages at their planned times (the same message is admitted through several workers),
answers the turns it owns, and writes one line per event to its own file, flushed at once so a
SIGKILL keeps them:

    deliver <message_id> <seq> <member>
    answer <message_id> <seq> <member>
    joined <member>

On SIGTERM it stops gracefully (finishes in-flight turns, appends its leave).
"""

from __future__ import annotations

import json
import random
import signal
import sys
import time
from collections.abc import Sequence
from typing import Any


def main(config: dict[str, Any]) -> None:
    shift = float(config.get("clock_shift", 0.0))
    if shift:
        # this host's wall clock is off; nothing in the Redis log may depend on it
        real_time = time.time
        time.time = lambda: real_time() + shift

    import anyio

    from bridge_core.conversation import Frame, Turn, obligation_id
    from bridge_core.ownership import AgentGroupMember, LogUnavailable, open_conversation_log
    from bridge_core.provider import InboundMessage

    out = open(config["out"], "a", buffering=1)
    rng = random.Random(config["seed"])

    def write(line: str) -> None:
        out.write(line + "\n")
        out.flush()

    async def run() -> None:
        log = await open_conversation_log(
            config["url"], channel=config["channel"], key_prefix=config["prefix"]
        )
        member: AgentGroupMember

        async def on_turn(turn: Turn, history: Sequence[Turn | Frame]) -> None:
            write(f"deliver {turn.message_id} {turn.seq} {member.current_id}")
            await anyio.sleep(rng.uniform(*config["answer_delay"]))
            await member.record_frame(turn, obligation_id("p", turn.channel, turn.message_id))
            write(f"answer {turn.message_id} {turn.seq} {member.current_id}")

        member = AgentGroupMember(
            log,
            member_id=config["name"],
            on_turn=on_turn,
            settle=config["settle"],
            heartbeat=config["heartbeat"],
            expiry=config["expiry"],
            follow_wait=0.2,
            drain_timeout=5.0,
        )

        async def admit_plan() -> None:
            schedule = anyio.Path(config["t0_file"])
            while not await schedule.exists():  # noqa: ASYNC110 (another process writes it)
                await anyio.sleep(0.05)
            t0 = float(await schedule.read_text())
            for item in config["plan"]:
                delay = t0 + item["at"] - time.monotonic()
                if delay > 0:
                    await anyio.sleep(delay)
                # a message planned before this worker started is admitted late, as a platform
                # replays events to a gateway that reconnects: the log's dedup drops the copies
                message = InboundMessage(
                    message_id=item["id"],
                    channel=config["channel"],
                    author=item["author"],
                    text="hello",
                    at=time.time(),
                )
                while True:  # the runtime's inbound path retries a transient failure too
                    try:
                        await log.admit(message)
                        break
                    except LogUnavailable:
                        await anyio.sleep(0.05)

        async def on_signal() -> None:
            with anyio.open_signal_receiver(signal.SIGTERM) as signals:
                async for _ in signals:
                    member.stop()
                    return

        async def serve() -> None:
            async with anyio.create_task_group() as inner:
                inner.start_soon(member.run)
                await member.ready.wait()
                write(f"joined {member.current_id}")
            tg.cancel_scope.cancel()  # member.run returned: it left gracefully

        async with anyio.create_task_group() as tg:
            tg.start_soon(on_signal)
            tg.start_soon(admit_plan)
            tg.start_soon(serve)
        await log.aclose()

    anyio.run(run, backend="asyncio")


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
