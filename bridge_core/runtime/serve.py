"""Running a gateway as a process: signals, event sources, the ready file, the config's secrets.

The first SIGTERM or SIGINT asks the gateway to stop gracefully (``Gateway.stop``); a second one
exits at once with status 128 + the signal number, leaving whatever was in flight to the ledger.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
from pydantic import BaseModel, SecretStr

from bridge_core.config import BridgeConfig
from bridge_core.runtime.event_sources import follow_file, read_stdin
from bridge_core.runtime.gateway import Gateway
from bridge_core.runtime.http_api import ShuttingDown
from bridge_core.runtime.logs import url_secrets

__all__ = ["config_secrets", "exit_process", "serve"]

log = logging.getLogger("bridge_core.runtime")


def _walk_secrets(value: Any) -> Iterator[str]:
    if isinstance(value, SecretStr):
        yield value.get_secret_value()
    elif isinstance(value, BaseModel):
        for name in type(value).model_fields:
            yield from _walk_secrets(getattr(value, name, None))
    elif isinstance(value, dict):
        for item in value.values():
            yield from _walk_secrets(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _walk_secrets(item)


def config_secrets(config: BridgeConfig) -> list[str]:
    """Every secret value in a config (tokens, store URL passwords), to redact from logs."""
    found = list(_walk_secrets(config))
    found += url_secrets(config.stores.ledger) + url_secrets(config.stores.membership)
    return found


async def _watch_signals(gateway: Gateway) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        first = True
        async for signum in signals:
            name = signal.Signals(signum).name
            if first:
                first = False
                log.info("%s: stopping gracefully (send it again to exit at once)", name)
                gateway.stop()
            else:
                log.warning("%s again: exiting now; unfinished replies stay in the ledger", name)
                exit_process(128 + signum)


def exit_process(code: int) -> None:
    """Flush and leave now. A worker thread blocked reading a terminal (stdin inbound, typed
    demo lines) can be abandoned by anyio but not joined, so a normal interpreter exit would
    wait for the next line; everything durable was already written and closed."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def _write_ready(path: Path, gateway: Gateway) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"url": gateway.url, "pid": os.getpid(), "id": gateway.gateway_id}))
    tmp.replace(path)  # atomic: a reader never sees half a file


async def serve(
    gateway: Gateway,
    *,
    events: str | None = None,
    ready_file: Path | None = None,
    handle_signals: bool = True,
    on_ready: Callable[[Gateway], None] | None = None,
) -> None:
    """Run ``gateway`` until it stops; ``events`` is ``-`` (stdin) or a file to follow;
    ``on_ready`` is called once, when it serves (``chatbridge run`` says what it serves)."""
    async with anyio.create_task_group() as tg:
        if handle_signals:
            tg.start_soon(_watch_signals, gateway)

        async def once_ready() -> None:
            await gateway.ready.wait()
            if on_ready is not None:
                on_ready(gateway)
            if events is not None:
                tg.start_soon(_feed_events, gateway, events)
            if ready_file is not None:
                await anyio.to_thread.run_sync(_write_ready, ready_file, gateway)

        tg.start_soon(once_ready)
        await gateway.run()
        tg.cancel_scope.cancel()


async def _feed_events(gateway: Gateway, source: str) -> None:
    try:
        if source == "-":
            await read_stdin(gateway.accept_events)
        else:
            await follow_file(Path(source), gateway.accept_events)
    except ShuttingDown:
        return
