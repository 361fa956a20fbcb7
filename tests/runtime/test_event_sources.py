"""Fleet events from standard input and from a followed file: a byte that is not UTF-8 is read
as U+FFFD; a line that cannot be used is logged with its number and skipped, whatever is wrong
with it (ADR 0070), and the lines after it still arrive."""

from __future__ import annotations

import io
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

import anyio
import pytest

from bridge_core.events import FleetEvent
from bridge_core.runtime.event_sources import follow_file, read_stdin

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Both backends: an event source is library code a fleet may run on either."""
    return str(request.param)


LINES = (
    b'{"kind": "AgentSpawned", "agent": "first"}\n'
    b'{"kind": "AgentSpawned", "agent": "caf\xe9"}\n'  # not UTF-8: read as U+FFFD
    b'{"kind": "AgentSpawned", "agent": "x\\ud800"}\n'  # a lone surrogate
    b'{"kind": "AgentSpawned", "agent": "x\\u0000"}\n'  # NUL
    + b"[" * 100_000
    + b"]" * 100_000
    + b"\n"  # nested too deeply
    + b'{"kind": "AgentSpawned", "agent": "last"}\n'
)


async def test_standard_input_skips_each_bad_line_and_keeps_reading(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(LINES), encoding="utf-8"))
    got: list[FleetEvent] = []

    async def sink(events: Sequence[FleetEvent]) -> None:
        got.extend(events)

    await read_stdin(sink)
    assert [e.agent for e in got] == ["first", "caf\ufffd", "last"]
    for number in (3, 4, 5):
        assert f"stdin line {number}: skipped" in caplog.text


async def test_a_followed_file_skips_each_bad_line_and_keeps_reading(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    path = tmp_path / "fleet.jsonl"
    path.write_bytes(LINES)
    got: list[FleetEvent] = []
    done = anyio.Event()

    async def sink(events: Sequence[FleetEvent]) -> None:
        got.extend(events)
        if got[-1].agent == "last":
            done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(follow_file, path, sink)
        with anyio.fail_after(10):
            await done.wait()
        tg.cancel_scope.cancel()
    assert [e.agent for e in got] == ["first", "caf\ufffd", "last"]
    for number in (3, 4, 5):
        assert f"line {number}: skipped" in caplog.text
