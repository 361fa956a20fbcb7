"""An agent as its own process, in a dozen lines of the SDK: it echoes what people say.

    python -m bridge_core.agent.example ws://127.0.0.1:8787/v1/agents --group support \\
        --channel ops [--token-env CHATBRIDGE_AGENT_TOKEN] [--name echo]

``chatbridge demo --agent-process`` runs it against the demo's gateway. SIGTERM or Ctrl-C closes
the session gracefully: the connection leaves its groups at once.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence

import anyio

from bridge_core.agent.session import connect


async def serve(
    url: str, *, group: str, channels: Sequence[str], token: str | None, name: str
) -> None:
    async with connect(url, token=token, group=group, channels=channels, name=name) as session:
        hello = session.hello
        assert hello is not None
        members = ", ".join(f"{c} as {m}" for c, m in hello.members.items())
        print(f"agent process {os.getpid()} joined {members}", flush=True)
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with anyio.create_task_group() as tg:

                async def stop_on_signal() -> None:
                    async for _ in signals:
                        tg.cancel_scope.cancel()

                tg.start_soon(stop_on_signal)
                async for turn in session:
                    await turn.reply(f"echo: {turn.text} (from agent process {os.getpid()})")
                tg.cancel_scope.cancel()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bridge_core.agent.example")
    parser.add_argument("url", help="the gateway's agent socket, ws://HOST:PORT/v1/agents")
    parser.add_argument("--group", required=True)
    parser.add_argument("--channel", action="append", required=True, dest="channels")
    parser.add_argument("--token-env", default="CHATBRIDGE_AGENT_TOKEN")
    parser.add_argument("--name", default="echo")
    args = parser.parse_args(argv)
    token = os.environ.get(args.token_env) or None
    anyio.run(
        lambda: serve(
            args.url, group=args.group, channels=args.channels, token=token, name=args.name
        )
    )


if __name__ == "__main__":
    main(sys.argv[1:])
