"""``call_deadline`` bounds a whole post or edit, as Discord's does, and the worker thread of a call
given up on ends on its own, sends nothing more, and is counted until it does."""

from __future__ import annotations

import time
from collections.abc import Callable

import anyio
import pytest
from bridge_teams import ClientCredentials, ConnectorTransport, TeamsProvider, TeamsSettings
from bridge_teams.testing.fake_teams import FakeTeams

from bridge_core import TransportError
from bridge_core.testing import Reply

pytestmark = pytest.mark.anyio

HANG = 60.0  # a scripted answer this late never comes: the fake drops it when it stops


def connector(
    settings: TeamsSettings, *, max_threads: int = 8, io_timeout: float | None = None
) -> ConnectorTransport:
    """The transport the provider builds. ``io_timeout`` (requests' own timeout, call_deadline in
    production) set above the deadline keeps a dropped thread alive past it, for a test to see."""
    timeout = io_timeout or settings.call_deadline
    credentials = ClientCredentials(
        app_id=settings.app_id,
        password=settings.app_password.get_secret_value(),
        token_url=str(settings.token_url),
        timeout=timeout,
    )
    return ConnectorTransport(credentials, timeout=timeout, max_threads=max_threads)


async def threads_end(transport: ConnectorTransport) -> None:
    ended = await anyio.to_thread.run_sync(transport.join_abandoned, 10.0)
    assert ended, f"{transport.abandoned_threads} threads given up on are still running"


async def test_a_slow_answer_fails_at_the_deadline(
    fake: FakeTeams, make_settings: Callable[..., TeamsSettings], channel: str
) -> None:
    settings = make_settings(fake, call_deadline=0.5)
    transport = connector(settings, io_timeout=5.0)  # the deadline, not requests, ends the wait
    fake.script("send_activity", Reply.slow(HANG))
    async with TeamsProvider(settings, profile="p", transport=transport) as provider:
        started = time.monotonic()
        with pytest.raises(TransportError, match=r"within the 0\.5 s call_deadline") as caught:
            await provider.post(channel, "slow")
        elapsed = time.monotonic() - started
        assert 0.5 <= elapsed < 2.0, f"failed after {elapsed:.2f} s, not at the 0.5 s deadline"
        assert caught.value.__cause__ is None and caught.value.__context__ is None
        assert transport.abandoned_threads == 1, "the hung request's thread is still counted"
        fake.stop()  # the fake drops the hung request; requests sees the connection close
        await threads_end(transport)
    assert fake.count("send_activity") == 1


async def test_the_deadline_bounds_the_whole_call_not_each_wait(
    fake: FakeTeams, make_settings: Callable[..., TeamsSettings], channel: str
) -> None:
    # Each wait (the token, then the post) stays well inside one second; together they do not.
    # A per-request timeout of one second would let this post through after 1.2 s.
    settings = make_settings(fake, call_deadline=1.0)
    fake.script("token", _slow_token(fake, 0.6))
    fake.script("send_activity", Reply.slow(0.6, Reply.json({"id": "late"}, status=201)))
    async with TeamsProvider(settings, profile="p") as provider:
        with pytest.raises(TransportError, match="call_deadline"):
            await provider.post(channel, "two slow waits")
    assert fake.count("token") == 1
    assert fake.count("send_activity") <= 1


async def test_a_call_given_up_on_while_fetching_its_token_sends_nothing(
    fake: FakeTeams, make_settings: Callable[..., TeamsSettings], channel: str
) -> None:
    # The token comes after the deadline but inside the token request's own timeout (as a fresh
    # token after a refused one can, late in a call): the thread must see its caller gone.
    settings = make_settings(fake, call_deadline=0.3)
    transport = connector(settings, io_timeout=5.0)
    fake.script("token", _slow_token(fake, 1.0))
    async with TeamsProvider(settings, profile="p", transport=transport) as provider:
        with pytest.raises(TransportError, match="call_deadline"):
            await provider.post(channel, "never sent")
        await threads_end(transport)
        assert fake.count("send_activity") == 0, "a thread given up on must not post late"
        await provider.post(channel, "sent")  # the token the dropped thread cached is used
    assert fake.texts(channel) == ["sent"]
    assert fake.count("token") == 1


async def test_threads_given_up_on_are_bounded(
    fake: FakeTeams, make_settings: Callable[..., TeamsSettings], channel: str
) -> None:
    settings = make_settings(fake, call_deadline=0.3)
    transport = connector(settings, max_threads=2, io_timeout=5.0)
    async with TeamsProvider(settings, profile="p", transport=transport) as provider:
        await provider.post(channel, "warm up")  # a token, so only the posts hang below
        late = Reply.slow(1.5, fake.error(503, "ServiceUnavailable"))
        fake.script("send_activity", late, times=2)
        for _ in range(2):
            with pytest.raises(TransportError, match="call_deadline"):
                await provider.post(channel, "hangs")
        assert transport.abandoned_threads == 2
        started = time.monotonic()
        with pytest.raises(TransportError, match="2 Bot Connector calls given up on"):
            await provider.post(channel, "refused at once")
        assert time.monotonic() - started < 0.3, "refused without waiting for the deadline"
        await threads_end(transport)
        assert fake.count("send_activity") == 3, "the refused call sent nothing"
        await provider.post(channel, "the connector answers again")
    assert fake.texts(channel) == ["warm up", "the connector answers again"]


def _slow_token(fake: FakeTeams, seconds: float) -> Reply:
    """The token service answering a valid token late (the fake's handler would answer at once)."""
    token = "slow-token-" + str(seconds)
    with fake.lock:
        fake.issued_tokens[token] = time.time() + 3600.0
    return Reply.slow(
        seconds, Reply.json({"token_type": "Bearer", "expires_in": 3600, "access_token": token})
    )
