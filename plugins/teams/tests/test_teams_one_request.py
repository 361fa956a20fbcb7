"""Every Teams call is exactly one request at the Bot Connector, under every fault (issue 13).

msrest's retry policy resends 408 and 5xx (POSTs included) by default; the transport zeroes it
(ADR 0046). Counted at the fake platform. The one exception by design: a 401 (the connector
refused our cached token, acting on nothing) is sent once more with a fresh token.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from bridge_teams import TeamsProvider, TeamsSettings
from bridge_teams.testing.fake_teams import FakeTeams

from bridge_core import MessageRejected, ProviderError, RateLimited, TransportError
from bridge_core.testing import Reply

from .conftest import DictStore

pytestmark = pytest.mark.anyio

FAULTS: dict[str, tuple[Callable[[], Reply], type[ProviderError], type[ProviderError]]] = {
    # name: (reply, error on a post, error on an edit)
    "429": (lambda: FakeTeams.error(429, "Throttled", retry_after=2), RateLimited, RateLimited),
    "408": (lambda: FakeTeams.error(408, "RequestTimeout"), TransportError, TransportError),
    "412": (lambda: FakeTeams.error(412, "PreconditionFailed"), TransportError, TransportError),
    "500": (lambda: FakeTeams.error(500, "ServiceError"), MessageRejected, TransportError),
    "502": (lambda: FakeTeams.error(502, "BadGateway"), TransportError, TransportError),
    "503": (lambda: FakeTeams.error(503, "ServiceUnavailable"), TransportError, TransportError),
    "504": (lambda: FakeTeams.error(504, "GatewayTimeout"), TransportError, TransportError),
    "dropped": (Reply.dropped, TransportError, TransportError),
}


@pytest.mark.parametrize("operation", ["post", "edit"])
@pytest.mark.parametrize("fault", list(FAULTS))
async def test_each_call_is_one_request_under_every_fault(
    fake: FakeTeams,
    make_settings: Callable[..., TeamsSettings],
    kv: DictStore,
    channel: str,
    fault: str,
    operation: str,
) -> None:
    reply, on_post, on_edit = FAULTS[fault]
    route = "send_activity" if operation == "post" else "update_activity"
    async with TeamsProvider(make_settings(fake), profile="p", kv=kv) as provider:
        ref = await provider.post(channel, "before")  # the token is fetched and cached here
        fake.script(route, reply(), times=None)
        before = fake.count()  # every route, the token service's included
        started = time.monotonic()
        with pytest.raises(on_post if operation == "post" else on_edit):
            if operation == "post":
                await provider.post(channel, "during")
            else:
                await provider.edit(ref, "during")
        elapsed = time.monotonic() - started
        assert fake.count() - before == 1, f"{fault}: the platform saw a resend"
        assert elapsed < 1.5, f"{fault}: the call took {elapsed:.2f} s"
