"""The gateway's SQLite ledger writer (ADR 0187): by default (``auto``) the record, claim and
settle statements run in a writer process of the gateway's own, which ends when the gateway
stops; ``thread`` starts none. Either way a message is recorded, sent once and settled."""

from __future__ import annotations

import os
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import ClassVar

import anyio
import pytest

from bridge_core.provider import Capabilities, ChatProvider, MessageRef
from bridge_core.runtime import Gateway, GatewayOptions, MessageRequest
from bridge_core.testing.processes import children_of, running, wait_ended

from .conftest import one_channel

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("builtin_plugins_only")]


class Posting(ChatProvider):
    """Keeps every post in ``posted``."""

    name = "posting"
    capabilities = Capabilities(edit=False, max_length=1000)
    posted: ClassVar[list[str]] = []

    async def post(self, channel: str, text: str, *, thread: str | None = None) -> MessageRef:
        Posting.posted.append(text)
        return MessageRef(channel, str(len(Posting.posted)))


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""  # ended meanwhile


@pytest.mark.parametrize(
    ("options", "children"),
    [(GatewayOptions(http=False), 1), (GatewayOptions(http=False, ledger_writer="thread"), 0)],
    ids=["default", "thread"],
)
async def test_by_default_the_gateway_writes_its_ledger_from_a_child_that_ends_with_it(
    tmp_path: Path, options: GatewayOptions, children: int
) -> None:
    Posting.posted = []
    before = set(children_of(os.getpid()))
    gateway = Gateway(one_channel(tmp_path, Posting), options=options)
    async with gateway:
        await gateway.accept_message(MessageRequest(channel="ops", text="hello"))
        with anyio.fail_after(10):
            while (await gateway.ledger_counts()).get("delivered") != 1:  # noqa: ASYNC110
                await anyio.sleep(0.01)
        started = [pid for pid in children_of(os.getpid()) if pid not in before]
        writers = [pid for pid in started if "sqlchild" in command_line(pid)]
        assert len(writers) == children, [command_line(pid) for pid in started]
        assert all(running(pid) for pid in writers)
    wait_ended(writers)
    assert Posting.posted == ["hello"]
    with closing(sqlite3.connect(tmp_path / "bridge.sqlite3")) as conn:
        assert conn.execute("SELECT state, count(*) FROM ledger GROUP BY state").fetchall() == [
            ("delivered", 1)
        ]
