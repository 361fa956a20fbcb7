"""The Python agent SDK (``bridge_core.agent``) on asyncio and on trio, against a real gateway on
its own loop: answers of every kind, events, graceful leave, reconnection as a new member, the
token refused, and a turn lost with its connection."""

from __future__ import annotations

import random
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from bridge_core.agent import Refused, TurnLost, connect
from bridge_core.conversation import Frame, Leave, LeaveReason
from bridge_core.provider import InboundMessage

from .conftest import OPTIONS, TOKEN, GatewayThread, make_config, posts, written


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def gw(tmp_path: Path) -> Iterator[GatewayThread]:
    thread = GatewayThread(make_config(tmp_path)).start()
    yield thread
    thread.stop()


_n = iter(range(1_000_000))


def say(gw: GatewayThread, text: str, author: str = "ann") -> None:
    assert gw.gateway is not None
    message = InboundMessage(
        message_id=f"s{next(_n)}-{time.monotonic_ns()}",
        channel="ops",
        author=author,
        text=text,
        at=time.time(),
    )
    assert gw.call(gw.gateway.inbound, "con", message)


def records(gw: GatewayThread) -> list[object]:
    assert gw.gateway is not None
    log = gw.gateway.channels["ops"].log
    assert log is not None
    return list(gw.call(lambda: log.read(after_seq=0, limit=100_000)))


async def until(condition, limit: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    with anyio.fail_after(limit):
        while not condition():  # noqa: ASYNC110 - the gateway runs in another thread
            await anyio.sleep(0.02)


@pytest.mark.anyio
async def test_the_sdk_answers_every_way_and_leaves_gracefully(
    gw: GatewayThread, tmp_path: Path
) -> None:
    async with connect(
        gw.url, token=TOKEN, group="support", channels=["ops"], name="sdk"
    ) as session:
        assert session.hello is not None
        member = session.hello.members["ops"]
        await anyio.to_thread.run_sync(time.sleep, OPTIONS.settle)
        ack = await session.send_events({"kind": "AgentSpawned", "agent": "sdk-a"})
        assert ack.recorded == "event" and ack.accepted == 1
        for text in ("one", "two", "three", "four"):
            await anyio.to_thread.run_sync(say, gw, text)
        answered = []
        async for turn in session:
            if turn.text == "one":
                ack = await turn.reply(f"re: {turn.text}")
                assert ack.recorded == "reply" and ack.obligation
            elif turn.text == "two":
                assert (await turn.busy("later please")).recorded == "busy"
            elif turn.text == "three":
                assert (await turn.decline()).recorded == "decline"
            else:
                await turn.fail("no model")
            answered.append(turn.text)
            if len(answered) == 4:
                break
    await until(lambda: {"re: one", "later please"} <= set(posts(tmp_path)))
    await until(lambda: any(isinstance(r, Leave) for r in records(gw)))
    log = records(gw)
    frames = [r for r in log if isinstance(r, Frame)]
    assert len(frames) == 3 and {f.member for f in frames} == {member}
    leaves = [r for r in log if isinstance(r, Leave)]
    assert [(r.member, r.reason) for r in leaves] == [(member, LeaveReason.GRACEFUL)]


@pytest.mark.anyio
async def test_a_refused_delta_is_not_taken_for_the_final_s_outcome(
    gw: GatewayThread, tmp_path: Path
) -> None:
    async with connect(
        gw.url, token=TOKEN, group="support", channels=["ops"], name="sdk"
    ) as session:
        await anyio.to_thread.run_sync(time.sleep, OPTIONS.settle)
        await anyio.to_thread.run_sync(say, gw, "stream it")
        async for turn in session:
            await turn.stream("part one ")
            await turn.stream("bad \x00 delta")  # refused by the gateway: an error, no ack
            ack = await turn.final("the whole final answer")
            assert ack.recorded == "final"
            break
    await until(lambda: "the whole final answer" in written(tmp_path))


@pytest.mark.anyio
async def test_a_drop_reconnects_as_a_new_member_and_the_old_turn_is_lost(
    gw: GatewayThread,
) -> None:
    assert gw.gateway is not None and gw.gateway.agent_sockets is not None
    sockets = gw.gateway.agent_sockets
    async with connect(
        gw.url,
        token=TOKEN,
        group="support",
        channels=["ops"],
        backoff=(0.05, 0.2),
        rng=random.Random(1),
    ) as session:
        assert session.hello is not None
        first = session.hello.members["ops"]
        await anyio.to_thread.run_sync(time.sleep, OPTIONS.settle)
        await anyio.to_thread.run_sync(say, gw, "before")
        turn = await session.__anext__()

        def drop() -> None:
            (connection,) = sockets.connections
            connection.ws._req.transport.abort()  # type: ignore[union-attr]

        gw._portal.call(drop)
        with pytest.raises(TurnLost):
            await turn.reply("too late")
        await until(lambda: session.connections == 2 and session.hello is not None)
        assert session.hello is not None and session.hello.members["ops"] != first
        # the old member expires; its unanswered turn comes back to the new connection
        again = await session.__anext__()
        assert again.text == "before" and again.id == turn.id
        await again.reply("answered after the drop")
    leaves = [r for r in records(gw) if isinstance(r, Leave)]
    assert (first, LeaveReason.EXPIRED) in [(r.member, r.reason) for r in leaves]


@pytest.mark.anyio
async def test_a_wrong_token_or_channel_is_refused_not_retried(gw: GatewayThread) -> None:
    with pytest.raises(Refused, match="403"):
        async with connect(gw.url, token="nope", group="support", channels=["ops"]):
            pass
    with pytest.raises(Refused, match="wrong_group"):
        async with connect(gw.url, token=TOKEN, group="other", channels=["ops"]):
            pass


def test_importing_the_sdk_does_not_load_the_gateway() -> None:
    # pydantic comes with the package root (bridge_core's vocabulary); the gateway's I/O stack
    # (aiohttp, redis, psycopg) and its runtime and ledger must not come with the SDK
    heavy = ("aiohttp", "redis", "psycopg", "bridge_core.runtime", "bridge_core.ledger")
    code = (
        f"import sys, bridge_core.agent; print(' '.join(m for m in {heavy!r} if m in sys.modules))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert loaded.stdout.strip() == ""
