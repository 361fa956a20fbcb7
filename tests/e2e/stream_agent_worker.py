"""An agent process on the SDK that streams its answers, for the kill tests: each turn ``qN``
is answered with ``streaming_agent.WORDS`` deltas, one every ``DELAY`` seconds, then ``final``.
It writes ``hello`` to READY_PATH once joined.

    python stream_agent_worker.py URL TOKEN NAME READY_PATH
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio

from bridge_core.agent import AgentError, connect

sys.path.insert(0, str(Path(__file__).resolve().parent))
from streaming_agent import DELAY, WORDS


async def serve(url: str, token: str, name: str, ready: Path) -> None:
    async with connect(url, token=token, group="support", channels=["ops"], name=name) as session:
        await anyio.Path(ready).write_text("hello")
        async for turn in session:
            try:
                for i in range(WORDS):
                    await anyio.sleep(DELAY)
                    await turn.stream(f"{turn.text}-w{i} ")
                await turn.final()
            except AgentError:  # the gateway went away mid-turn: it hands the turn out again
                continue


def main() -> None:
    url, token, name, ready = sys.argv[1:5]
    anyio.run(serve, url, token, name, Path(ready))


if __name__ == "__main__":
    main()
