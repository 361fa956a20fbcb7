"""Inbound dedup and the reconnect watcher, on virtual time."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import anyio
import pytest
import trio.testing

from bridge_core.inbound import (
    InboundDedup,
    ReconnectWatcher,
    WatcherStatistics,
    backoff_delay,
    deduplicated,
)
from bridge_core.provider import (
    ChatProvider,
    ConnectionLost,
    InboundMessage,
    InboundSink,
    TransportError,
    Unreachable,
)


@pytest.fixture
def anyio_backend() -> tuple[str, dict[str, Any]]:
    return ("trio", {"clock": trio.testing.MockClock(autojump_threshold=0)})


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def msg(mid: str, *, bot: bool = False) -> InboundMessage:
    return InboundMessage(
        message_id=mid, channel="C", author="u", text="t", at=0.0, author_is_bot=bot
    )


# ---------------------------------------------------------------------- dedup


def test_an_id_is_dropped_within_the_window_and_admitted_after_it() -> None:
    clock = Clock()
    dedup = InboundDedup(clock=clock)
    assert dedup.window == 600.0
    assert dedup.mark_seen("a") is False
    clock.now = 599.0
    assert dedup.mark_seen("a") is True
    clock.now = 600.0  # ten minutes after the first sight (a replay does not extend it)
    assert dedup.mark_seen("a") is False
    assert dedup.dropped == 1


def test_the_dedup_is_bounded_oldest_forgotten_first() -> None:
    clock = Clock()
    dedup = InboundDedup(max_size=3, clock=clock)
    for i, mid in enumerate("abcd"):
        clock.now = float(i)
        assert not dedup.mark_seen(mid)
    assert len(dedup) == 3 and "a" not in dedup and "d" in dedup


def test_adopt_keeps_the_original_seen_times() -> None:
    clock = Clock()
    old = InboundDedup(clock=clock)
    old.mark_seen("early")
    clock.now = 300.0
    old.mark_seen("late")
    clock.now = 500.0
    new = InboundDedup(clock=clock)
    new.mark_seen("fresh")
    new.adopt(old)
    assert [mid for mid, _ in new.live()] == ["early", "late", "fresh"]
    clock.now = 599.0
    assert "early" in new
    clock.now = 600.0  # the window did not stretch at the rebuild
    assert "early" not in new and "late" in new
    clock.now = 900.0
    assert "late" not in new and "fresh" in new


def test_adopt_ignores_expired_ids() -> None:
    clock = Clock()
    old = InboundDedup(clock=clock, window=10.0)
    old.mark_seen("gone")
    clock.now = 11.0
    new = InboundDedup(clock=clock, window=10.0)
    new.adopt(old)
    assert new.live() == []


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="window > 0"):
        InboundDedup(window=0)


@pytest.mark.anyio
async def test_the_deduplicated_sink_drops_replays_and_bots() -> None:
    got: list[str] = []

    async def sink(message: InboundMessage) -> None:
        got.append(message.message_id)

    filtered = deduplicated(sink, InboundDedup(clock=Clock()))
    for message in (msg("a"), msg("a"), msg("b", bot=True), msg("c")):
        await filtered(message)
    assert got == ["a", "c"]


@pytest.mark.anyio
async def test_a_message_whose_handling_failed_is_not_dropped_on_retry() -> None:
    attempts: list[str] = []

    async def flaky_sink(message: InboundMessage) -> None:
        attempts.append(message.message_id)
        if len(attempts) == 1:
            raise TransportError("the log did not answer")

    filtered = deduplicated(flaky_sink, InboundDedup(clock=Clock()))
    with pytest.raises(TransportError):
        await filtered(msg("a"))
    await filtered(msg("a"))  # the platform's retry
    await filtered(msg("a"))  # a replay after success: dropped
    assert attempts == ["a", "a"]


# ---------------------------------------------------------------------- watcher


class FlakyProvider(ChatProvider):
    """Delivers its scripted messages, then fails as scripted."""

    name = "flaky"

    def __init__(self, script: list[Any]) -> None:
        self.script = script
        self.closed = False

    async def receive(self, sink: InboundSink) -> None:
        for step in self.script:
            if isinstance(step, BaseException):
                raise step
            if step == "hang":
                await anyio.sleep_forever()
            await sink(step)

    async def aclose(self) -> None:
        self.closed = True


def scripted(*scripts: list[Any], fail_builds: int = 0) -> tuple[Any, list[FlakyProvider]]:
    built: list[FlakyProvider] = []
    pending = list(scripts)
    failures = [fail_builds]

    async def factory() -> ChatProvider:
        if failures[0]:
            failures[0] -= 1
            raise TransportError("DNS failure while building")
        provider = FlakyProvider(pending.pop(0))
        built.append(provider)
        return provider

    return factory, built


def test_backoff_schedule() -> None:
    delays = [backoff_delay(i, initial=30.0, cap=300.0) for i in range(7)]
    assert delays == [30.0, 60.0, 120.0, 240.0, 300.0, 300.0, 300.0]


@pytest.mark.anyio
async def test_reconnects_with_backoff_adopts_the_dedup_and_reports_the_reconnect() -> None:
    got: list[str] = []
    reconnected: list[tuple[str, float]] = []

    async def sink(message: InboundMessage) -> None:
        got.append(message.message_id)

    async def on_reconnected(platform: str) -> None:
        reconnected.append((platform, anyio.current_time()))

    factory, built = scripted(
        [msg("m1"), msg("m2"), ConnectionLost("socket closed")],
        [ConnectionLost("again")],
        # the platform replays m2 to the new connection: dropped by the adopted ids
        [msg("m2"), msg("m3"), "hang"],
    )
    watcher = ReconnectWatcher(factory, sink, platform="slack", on_reconnected=on_reconnected)
    start = anyio.current_time()
    with anyio.move_on_after(1000):
        await watcher.run()
    assert got == ["m1", "m2", "m3"]
    assert watcher.delays == [30.0, 60.0]
    assert [round(t - start) for _p, t in reconnected] == [30, 90]
    assert {p for p, _t in reconnected} == {"slack"}
    assert built[0].closed and built[1].closed and not built[2].closed
    assert watcher.provider is built[2] and watcher.reconnects == 2


@pytest.mark.anyio
async def test_transient_failures_are_retried_forever_with_a_capped_backoff() -> None:
    scripts = [[TransportError(f"503 number {i}")] for i in range(12)] + [["hang"]]
    factory, built = scripted(*scripts, fail_builds=2)

    async def sink(message: InboundMessage) -> None:
        raise AssertionError("no messages")

    watcher = ReconnectWatcher(factory, sink, platform="discord")
    with anyio.move_on_after(10_000):
        await watcher.run()
    assert watcher.delays[:5] == [30.0, 60.0, 120.0, 240.0, 300.0]
    assert set(watcher.delays[4:]) == {300.0} and len(watcher.delays) == 14
    assert len(built) == 13 and watcher.gave_up is None


@pytest.mark.anyio
async def test_the_backoff_starts_over_after_a_healthy_connection() -> None:
    factory, _ = scripted(
        [ConnectionLost("1")],
        [ConnectionLost("2")],
        [msg("ok"), ConnectionLost("3")],
        ["hang"],
    )

    async def sink(message: InboundMessage) -> None:
        pass

    watcher = ReconnectWatcher(factory, sink, platform="teams")
    with anyio.move_on_after(10_000):
        await watcher.run()
    assert watcher.delays == [30.0, 60.0, 30.0]


@pytest.mark.anyio
async def test_a_permanent_failure_gives_up_with_one_clear_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    factory, built = scripted([msg("m1"), Unreachable("invalid_auth: token revoked")])
    got: list[str] = []

    async def sink(message: InboundMessage) -> None:
        got.append(message.message_id)

    watcher = ReconnectWatcher(factory, sink, platform="slack")
    with caplog.at_level(logging.ERROR, logger="bridge_core.inbound"):
        await watcher.run()  # returns: no retry
    assert got == ["m1"] and len(built) == 1 and built[0].closed
    assert isinstance(watcher.gave_up, Unreachable)
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "giving up" in errors[0].getMessage()
    assert "token revoked" in errors[0].getMessage()


@pytest.mark.anyio
async def test_statistics_is_one_frozen_snapshot_of_its_counters_and_state() -> None:
    factory, _ = scripted(
        [msg("m1"), ConnectionLost("socket closed")],
        [msg("m2"), "hang"],
        fail_builds=1,
    )

    async def sink(message: InboundMessage) -> None:
        pass

    watcher = ReconnectWatcher(factory, sink, platform="slack")
    before = watcher.statistics()
    assert before == WatcherStatistics(
        reconnects=0,
        backoffs=0,
        build_failures=0,
        connections_lost=0,
        receiving=False,
        last_backoff=None,
        gave_up=None,
        dedup_ids=0,
    )
    async with anyio.create_task_group() as group:
        group.start_soon(watcher.run)
        await anyio.sleep(1000)  # a failed build, a connection lost, two rebuilds: now hanging
        during = watcher.statistics()
        group.cancel_scope.cancel()
    # 30 s after the failed build, 30 s again after a connection that had delivered a message
    assert during == WatcherStatistics(
        reconnects=2,
        backoffs=2,
        build_failures=1,
        connections_lost=1,
        receiving=True,
        last_backoff=30.0,
        gave_up=None,
        dedup_ids=2,  # m1, adopted by the rebuilt instance's dedup, and m2
    )
    assert before.reconnects == 0  # a snapshot, not a view
    assert watcher.statistics().receiving is False  # cancelled: no receive is running
    with pytest.raises(dataclasses.FrozenInstanceError):
        during.reconnects = 0  # type: ignore[misc]


@pytest.mark.anyio
async def test_statistics_says_why_the_watcher_gave_up() -> None:
    factory, _ = scripted([Unreachable("invalid_auth: token revoked")])

    async def sink(message: InboundMessage) -> None:
        pass

    watcher = ReconnectWatcher(factory, sink, platform="slack")
    await watcher.run()
    stats = watcher.statistics()
    assert stats.gave_up == "invalid_auth: token revoked"
    assert (stats.receiving, stats.connections_lost, stats.reconnects) == (False, 0, 0)
