"""Every Discord call is exactly one request at the platform, and a cut-off call wedges nothing.

discord.py's HTTP client sleeps and resends inside a call (a 429 under its 30 s floor, a 500,
502, 504 or 524, a reset connection) and, when our ``call_deadline`` cancels it mid-sleep, skips
its bucket's reset: the bucket stays at ``remaining=0`` and every later call waits inside
discord.py until the deadline cuts it off again, with no request sent (issue 13). The provider
sends its REST calls itself (``bridge_discord.rest``); these tests count at the fake platform.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from bridge_discord import DiscordProvider, DiscordSettings
from bridge_discord.testing.fake_discord import FakeDiscord

from bridge_core import ProviderError, RateLimited, TransportError
from bridge_core.testing import Reply

pytestmark = pytest.mark.anyio

FAULTS: dict[str, tuple[Callable[[], Reply], type[ProviderError]]] = {
    "429 short": (lambda: FakeDiscord.rate_limited(0.3), RateLimited),
    "429 within the deadline": (lambda: FakeDiscord.rate_limited(2.0), RateLimited),
    "429 past the deadline": (lambda: FakeDiscord.rate_limited(20.0), RateLimited),
    "429 global": (lambda: FakeDiscord.rate_limited(0.5, is_global=True), RateLimited),
    "500": (lambda: FakeDiscord.error(500, 0, "500: Internal Server Error"), TransportError),
    "502": (lambda: Reply.text("bad gateway", status=502), TransportError),
    "504": (lambda: Reply.text("gateway timeout", status=504), TransportError),
    "524": (lambda: Reply.text("a timeout occurred", status=524), TransportError),
    "dropped": (Reply.dropped, TransportError),
}


@pytest.mark.parametrize("operation", ["post", "edit"])
@pytest.mark.parametrize("fault", list(FAULTS))
async def test_each_call_is_one_request_under_every_fault(
    fake: FakeDiscord,
    make_settings: Callable[..., DiscordSettings],
    channel: int,
    fault: str,
    operation: str,
) -> None:
    reply, expected = FAULTS[fault]
    route = "create_message" if operation == "post" else "edit_message"
    async with DiscordProvider(make_settings(fake, call_deadline=1.0), profile="p") as provider:
        ref = await provider.post(str(channel), "before")
        fake.script(route, reply(), times=None)  # the platform keeps failing
        before = fake.count(route)
        started = time.monotonic()
        with pytest.raises(expected):
            if operation == "post":
                await provider.post(str(channel), "during")
            else:
                await provider.edit(ref, "during")
        elapsed = time.monotonic() - started
        assert fake.count(route) - before == 1, f"{fault}: the platform saw a resend"
        assert elapsed < 1.5, f"{fault}: the call waited {elapsed:.2f} s inside the provider"


async def test_a_429_carries_the_platforms_retry_after(
    fake: FakeDiscord, provider: DiscordProvider, channel: int
) -> None:
    fake.script("create_message", FakeDiscord.rate_limited(2.5))
    with pytest.raises(RateLimited) as caught:
        await provider.post(str(channel), "too soon")
    assert caught.value.retry_after == pytest.approx(2.5)


@pytest.mark.parametrize(
    "stall",
    [
        pytest.param(lambda: FakeDiscord.rate_limited(10.0), id="429 between deadline and 30 s"),
        pytest.param(lambda: FakeDiscord.error(500, 0, "500"), id="5xx run past the deadline"),
        pytest.param(lambda: Reply.slow(3.0), id="no answer within the deadline"),
    ],
)
async def test_a_call_cut_off_by_the_deadline_does_not_wedge_the_channel(
    fake: FakeDiscord,
    make_settings: Callable[..., DiscordSettings],
    channel: int,
    stall: Callable[[], Reply],
) -> None:
    async with DiscordProvider(make_settings(fake, call_deadline=0.5), profile="p") as provider:
        # The first call of a fresh bucket (discord.py knows no limit yet), as after a restart.
        fake.script("create_message", *(stall() for _ in range(3)))
        with pytest.raises(ProviderError):
            await provider.post(str(channel), "cut off")
        fake.clear_scripts("create_message")
        before = fake.count("create_message")
        started = time.monotonic()
        for n in range(3):
            await provider.post(str(channel), f"after {n}")
        assert fake.count("create_message") - before == 3
        assert time.monotonic() - started < 4.0
