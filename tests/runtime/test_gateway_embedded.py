"""The Gateway embedded in a program (real time, SQLite in a temporary folder, console provider
writing a transcript): events, messages, turns, busy agents, health, metrics, graceful stop."""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import anyio
import pytest

from bridge_core.config import BridgeConfig, parse_config
from bridge_core.conversation import LogRecord, Turn
from bridge_core.events import parse_event
from bridge_core.ledger import Schedule, is_marked
from bridge_core.plugins import create_plugin_manager
from bridge_core.provider import (
    Capabilities,
    ChatProvider,
    ConnectionLost,
    InboundMessage,
    MessageRef,
    NotFound,
    TransportError,
)
from bridge_core.runtime import (
    AgentBusy,
    ApiError,
    Gateway,
    GatewayError,
    GatewayOptions,
    MessageRequest,
    ShuttingDown,
)

from .conftest import one_channel

pytestmark = pytest.mark.usefixtures("builtin_plugins_only")


def make_config(tmp_path: Path, **api: Any) -> BridgeConfig:
    data = {
        "profiles": {
            "con": {
                "provider": "console",
                "settings": {"transcript": str(tmp_path / "t.jsonl"), "output": "none"},
            }
        },
        "channels": {
            "ops": {"profile": "con", "channel_id": "ops", "notify": {"hold": 0.05}},
            "quiet": {
                "profile": "con",
                "channel_id": "quiet",
                "kinds": ["AgentFinished"],
                "notify": {"hold": 0.05},
            },
        },
        "stores": {"ledger": str(tmp_path / "bridge.sqlite3")},
        "api": api,
    }
    return parse_config(data, providers=create_plugin_manager().providers)


def posts(tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "t.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


async def until(condition: Any, limit: float = 10.0) -> None:
    with anyio.fail_after(limit):
        while not condition():  # noqa: ASYNC110 - waiting on a file another task writes
            await anyio.sleep(0.01)


async def rows_reach(gateway: Gateway, state: str, count: int) -> None:
    with anyio.fail_after(10):
        while (await gateway.ledger_counts())[state] != count:  # noqa: ASYNC110
            await anyio.sleep(0.01)


def message(i: int, text: str) -> InboundMessage:
    return InboundMessage(
        message_id=f"m{i}", channel="ops", author="ann", text=text, at=time.time()
    )


@pytest.mark.anyio
async def test_embedded_gateway_serves_every_flow(tmp_path: Path) -> None:
    calls: list[tuple[str, list[str]]] = []

    async def agent(turn: Turn, history: Sequence[LogRecord]) -> str:
        calls.append((turn.text, [r.text for r in history if isinstance(r, Turn)]))
        if turn.text == "too much":
            raise AgentBusy("at capacity", notice="busy, try later")
        return f"you said {turn.text}"

    gateway = Gateway(
        make_config(tmp_path),
        options=GatewayOptions(port=0, settle=0.0, heartbeat=0.2),
        agents={"ops": agent},
    )
    async with gateway:
        assert gateway.url is not None and gateway.url.startswith("http://127.0.0.1:")
        await gateway.accept_events(
            [
                parse_event({"kind": "AgentSpawned", "agent": "a1"}),
                parse_event({"kind": "AgentFinished", "agent": "a1", "outcome": "failed"}),
                parse_event({"kind": "Mystery", "agent": "a1"}),
            ]
        )
        await gateway.accept_events(  # one kind: counted by one identity count
            [parse_event({"kind": "Output", "agent": "a2", "text": t}) for t in ("x", "y")]
        )
        receipt = await gateway.accept_message(MessageRequest(channel="ops", text="deploy done"))
        again = await gateway.accept_message(
            MessageRequest(channel="ops", text="keyed", idempotency_key="k1")
        )
        repeat = await gateway.accept_message(
            MessageRequest(channel="ops", text="keyed", idempotency_key="k1")
        )
        assert not receipt.duplicate and not again.duplicate
        assert repeat.duplicate and repeat.obligation == again.obligation
        for other in (
            MessageRequest(channel="ops", text="another message", idempotency_key="k1"),
            MessageRequest(channel="ops", text="keyed", thread="t9", idempotency_key="k1"),
        ):  # the key names another message: not a silent 202
            with pytest.raises(ApiError) as refused:
                await gateway.accept_message(other)
            assert refused.value.status == 409 and refused.value.field == "idempotency_key"
        assert await gateway.inbound("con", message(1, "hello"))
        assert not await gateway.inbound("con", message(1, "hello"))  # a replay
        assert await gateway.inbound("con", message(2, "too much"))

        def texts() -> list[tuple[str, str]]:
            return [(p["channel"], p["text"]) for p in posts(tmp_path) if p["op"] == "post"]

        await until(lambda: len(texts()) >= 6)
        await rows_reach(gateway, "delivered", 4)  # settled just after each send
        health = await gateway.api.health()
        assert health.unhealthy == []
        metrics = (await gateway.api.metrics_text()).decode()
    sent = texts()
    assert ("ops", "deploy done") in sent and ("ops", "keyed") in sent
    assert sent.count(("ops", "keyed")) == 1
    assert ("ops", "you said hello") in sent
    assert ("ops", "busy, try later") in sent
    # the filters: "quiet" takes only AgentFinished, "ops" everything that notifies; each
    # channel has its own sender, so the two posts may come in either order
    assert sorted(c for c, t in sent if "a1" in t) == ["ops", "quiet"]
    assert calls == [("hello", ["hello"]), ("too much", ["hello", "too much"])]
    assert 'chatbridge_ledger_rows{state="delivered"} 4.0' in metrics
    assert 'chatbridge_busy_notices_total{channel="ops"} 1.0' in metrics
    assert 'chatbridge_events_in_total{kind="Unknown"} 1.0' in metrics
    assert 'chatbridge_events_in_total{kind="AgentSpawned"} 1.0' in metrics
    assert 'chatbridge_events_in_total{kind="Output"} 2.0' in metrics
    assert 'chatbridge_turns_answered_total{channel="ops"} 2.0' in metrics
    with pytest.raises(ShuttingDown):
        await gateway.accept_events([])


class FlakyProvider(ChatProvider):
    """Instance 1 fails its sends and then loses its connection; later instances work."""

    name = "flaky"
    capabilities = Capabilities(edit=False, max_length=1000, inbound=True)
    built: ClassVar[list[FlakyProvider]] = []
    drop_now: ClassVar[anyio.Event]

    def __init__(self) -> None:
        self.index = len(FlakyProvider.built)
        self.posted: list[str] = []
        FlakyProvider.built.append(self)

    async def post(self, channel: str, text: str, *, thread: str | None = None) -> MessageRef:
        if self.index == 0:
            raise TransportError("network down")
        self.posted.append(text)
        return MessageRef(channel, f"{self.index}-{len(self.posted)}")

    async def receive(self, sink: Any) -> None:
        if self.index == 0:
            await FlakyProvider.drop_now.wait()
            raise ConnectionLost("socket closed")
        await anyio.sleep_forever()


@pytest.mark.anyio
async def test_a_rebuilt_connection_takes_over_sending_and_resends_failed_rows(
    tmp_path: Path,
) -> None:
    FlakyProvider.built = []
    FlakyProvider.drop_now = anyio.Event()
    gateway = Gateway(
        one_channel(tmp_path, FlakyProvider),
        options=GatewayOptions(http=False, reconnect_backoff=0.05),
    )
    async with gateway:
        await gateway.accept_message(MessageRequest(channel="ops", text="after the outage"))
        await until(lambda: gateway.channels["ops"].sender.statistics().transport_errors >= 1)
        await rows_reach(gateway, "failed", 1)  # settled just after the send failed
        FlakyProvider.drop_now.set()
        await until(lambda: len(FlakyProvider.built) == 2 and FlakyProvider.built[1].posted)
        assert gateway.channels["ops"].sender.provider is FlakyProvider.built[1]
        await rows_reach(gateway, "delivered", 1)
    [text] = FlakyProvider.built[1].posted
    assert is_marked(text) and text.endswith("after the outage")


def test_refuses_a_public_address_without_a_token(tmp_path: Path) -> None:
    with pytest.raises(GatewayError, match="without an API token"):
        Gateway(make_config(tmp_path, host="0.0.0.0"))
    Gateway(make_config(tmp_path, host="0.0.0.0", token="a-long-enough-token"))
    Gateway(make_config(tmp_path, host="::1"))


@pytest.mark.anyio
async def test_a_taken_port_is_a_clear_startup_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        gateway = Gateway(make_config(tmp_path), options=GatewayOptions(port=port))
        with pytest.raises(GatewayError, match=f"cannot listen on 127.0.0.1:{port}"):
            await gateway.run()


@pytest.mark.anyio
async def test_a_crash_between_the_ledger_row_and_the_frame_answers_once(tmp_path: Path) -> None:
    runs: list[str] = []

    async def agent(turn: Turn, history: Sequence[LogRecord]) -> str:
        runs.append(turn.text)
        return f"echo: {turn.text}"

    config = make_config(tmp_path)
    crashed = f"{socket.gethostname()}|{os.getpid()}|a-run-that-died"
    first = Gateway(
        config,
        options=GatewayOptions(http=False, settle=0.0, heartbeat=0.2, ledger_owner=crashed),
        agents={"ops": agent},
    )
    async with first:
        log = first.channels["ops"].log
        assert log is not None

        async def crash(*args: Any) -> Any:
            raise RuntimeError("the process died here")

        log.record_frame = crash  # type: ignore[method-assign]
        assert await first.inbound("con", message(7, "hello"))
        await until(lambda: runs == ["hello"])
        counts: dict[str, int] = {}
        while counts.get("pending") != 1:
            counts = await first.ledger_counts()
            await anyio.sleep(0.01)
    assert not [p for p in posts(tmp_path) if p["op"] == "post"]  # recorded, never sent

    second = Gateway(
        config, options=GatewayOptions(http=False, settle=0.0, heartbeat=0.2), agents={"ops": agent}
    )
    async with second:
        await until(lambda: len(runs) == 2)  # the turn had no frame: it is answered again
        await until(lambda: second.channels["ops"].answered == 1)
        await rows_reach(second, "delivered", 1)
    sent = [p["text"] for p in posts(tmp_path) if p["op"] == "post"]
    assert sent == ["echo: hello"]  # the boot sweep sent the row clean; the re-answer added none


class HeldProvider(ChatProvider):
    """Posts wait for ``release``; ``started`` is set when the first post reaches the platform."""

    name = "held"
    capabilities = Capabilities(edit=False, max_length=1000)
    started: ClassVar[anyio.Event]
    release: ClassVar[anyio.Event]
    posted: ClassVar[list[str]]

    async def post(self, channel: str, text: str, *, thread: str | None = None) -> MessageRef:
        HeldProvider.started.set()
        await HeldProvider.release.wait()
        HeldProvider.posted.append(text)
        return MessageRef(channel, str(len(HeldProvider.posted)))


@pytest.mark.anyio
async def test_replies_queued_behind_a_send_stay_pending_until_their_turn(
    tmp_path: Path,
) -> None:
    """The row is claimed when the channel's sender takes the reply, not when it queues: a crash
    now would resend the queued replies clean, and only the one in flight labelled."""
    HeldProvider.started, HeldProvider.release, HeldProvider.posted = (
        anyio.Event(),
        anyio.Event(),
        [],
    )
    gateway = Gateway(one_channel(tmp_path, HeldProvider), options=GatewayOptions(http=False))
    async with gateway:
        for text in ("one", "two", "three"):
            await gateway.accept_message(MessageRequest(channel="ops", text=text))
        with anyio.fail_after(10):
            await HeldProvider.started.wait()
        sender = gateway.channels["ops"].sender
        await until(lambda: sender.queued == 2)
        counts = await gateway.ledger_counts()
        assert (counts["attempting"], counts["pending"]) == (1, 2), counts
        HeldProvider.release.set()
        await rows_reach(gateway, "delivered", 3)
    assert sorted(HeldProvider.posted) == ["one", "three", "two"]


class DownForOne(ChatProvider):
    """The platform answers every post of the text ``stuck`` "thread not found" until ``up`` is
    set (read as transient by the ledger, and no pause of the channel, which keeps this quick)."""

    name = "downforone"
    capabilities = Capabilities(edit=False, max_length=1000)
    up: ClassVar[bool] = False
    posted: ClassVar[list[str]] = []
    refused: ClassVar[int] = 0

    def __init__(self) -> None:
        pass

    async def post(self, channel: str, text: str, *, thread: str | None = None) -> MessageRef:
        if text.endswith("stuck") and not DownForOne.up:
            DownForOne.refused += 1
            raise NotFound("thread_not_found")
        DownForOne.posted.append(text)
        return MessageRef(channel, str(len(DownForOne.posted)))


@pytest.mark.anyio
async def test_a_long_running_gateway_delivers_a_spent_reply_without_a_restart(
    tmp_path: Path,
) -> None:
    """Its in-process resends spent, the reply waits ``failed`` with no timer; the next send
    the channel takes gives it its last attempt (ADR 0029), with no restart."""
    DownForOne.up, DownForOne.posted, DownForOne.refused = False, [], 0
    schedule = Schedule(resend_delays=(0.05, 0.1), sweep_interval=0.1)
    gateway = Gateway(
        one_channel(tmp_path, DownForOne),
        options=GatewayOptions(http=False, ledger_schedule=schedule),
    )
    async with gateway:
        await gateway.accept_message(MessageRequest(channel="ops", text="stuck"))
        await until(lambda: DownForOne.refused == 3)
        await rows_reach(gateway, "failed", 1)
        await anyio.sleep(1.0)  # many sweeps: none takes a parked row of a live owner
        assert DownForOne.refused == 3 and DownForOne.posted == []
        DownForOne.up = True
        await gateway.accept_message(MessageRequest(channel="ops", text="fine"))
        await rows_reach(gateway, "delivered", 2)
    assert DownForOne.posted[0] == "fine"
    assert is_marked(DownForOne.posted[1]) and DownForOne.posted[1].endswith("stuck")


@pytest.mark.anyio
async def test_a_gateway_runs_once(tmp_path: Path) -> None:
    gateway = Gateway(make_config(tmp_path), options=GatewayOptions(http=False))
    async with gateway:
        pass
    with pytest.raises(RuntimeError, match="already run; build a new Gateway"):
        await gateway.run()
