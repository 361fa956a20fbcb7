"""An agent process on the SDK, for the multi-process tests: answers every turn it gets with
``answer: <text>`` after a short random think time, logging each turn and each ack (one JSON line
each, flushed) so the test can classify every extra delivery. SIGTERM closes the session
gracefully (a graceful leave); SIGKILL is a drop.

    python agent_worker.py URL TOKEN NAME LOG_PATH [SEED]
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import time

import anyio

from bridge_core.agent import AgentError, Turn, connect


def main() -> None:
    url, token, name, log_path = sys.argv[1:5]
    seed = int(sys.argv[5]) if len(sys.argv) > 5 else os.getpid()
    rng = random.Random(seed)
    out = open(log_path, "a", buffering=1, encoding="utf-8")

    def note(**record: object) -> None:
        out.write(
            json.dumps({"pid": os.getpid(), "name": name, "at": time.time(), **record}) + "\n"
        )

    async def answer(turn: Turn, member: str) -> None:
        note(event="turn", turn=turn.id, text=turn.text, member=member)
        await anyio.sleep(rng.uniform(0.0, 0.08))
        try:
            ack = await turn.reply(f"answer: {turn.text}")
        except AgentError as error:
            note(event="lost", turn=turn.id, error=type(error).__name__)
            return
        note(event="ack", turn=turn.id, obligation=ack.obligation)

    async def run() -> None:
        async with connect(
            url, token=token, group="support", channels=["ops"], name=name, concurrency=2,
            backoff=(0.05, 0.5), rng=rng,
        ) as session:  # fmt: skip
            assert session.hello is not None
            note(event="hello", member=session.hello.members["ops"])
            with anyio.open_signal_receiver(signal.SIGTERM) as signals:
                async with anyio.create_task_group() as tg:

                    async def on_term() -> None:
                        async for _ in signals:
                            note(event="closing")
                            tg.cancel_scope.cancel()
                            return

                    tg.start_soon(on_term)
                    async for turn in session:
                        member = session.hello.members["ops"] if session.hello else "?"
                        tg.start_soon(answer, turn, member)
        note(event="closed")

    anyio.run(run)


if __name__ == "__main__":
    main()
