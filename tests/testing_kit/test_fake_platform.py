"""The fake-platform server: real HTTP, a record of every request, scripted faults."""

from __future__ import annotations

import aiohttp
import pytest
import requests

from bridge_core.testing.fake_platform import (
    UNMATCHED,
    FakePlatform,
    FakePlatformError,
    RecordedRequest,
    Reply,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _echo(request: RecordedRequest) -> Reply:
    return Reply.json({"id": request.params.get("id"), "got": request.json})


@pytest.fixture
def fake(fake_platform: FakePlatform) -> FakePlatform:
    fake_platform.add_route("POST", "/items/{id}", _echo, name="items")
    return fake_platform


def test_a_blocking_client_is_served_and_recorded(fake: FakePlatform) -> None:
    response = requests.post(
        fake.url("/items/7?x=1"), json={"a": 1}, headers={"X-Key": "v"}, timeout=5
    )
    assert response.json() == {"id": "7", "got": {"a": 1}}
    recorded = fake.last("items")
    assert (recorded.method, recorded.path, recorded.query) == ("POST", "/items/7", {"x": "1"})
    assert recorded.header("x-key") == "v"
    assert recorded.content_type == "application/json"
    assert recorded.params == {"id": "7"}


async def test_an_async_client_is_served_and_form_bodies_parse(fake: FakePlatform) -> None:
    fake.add_route("POST", "/form", lambda r: Reply.json(r.form), name="form")
    async with aiohttp.ClientSession() as session:
        async with session.post(fake.url("/form"), data={"k": "v w"}) as response:
            assert await response.json() == {"k": "v w"}
    assert fake.last().content_type == "application/x-www-form-urlencoded"


def test_scripted_replies_come_first_in_order_then_the_handler(fake: FakePlatform) -> None:
    fake.script("items", Reply.json({"e": 1}, status=500), Reply.json({"e": 2}, status=429))
    statuses = [requests.post(fake.url("/items/1"), json={}, timeout=5) for _ in range(3)]
    assert [r.status_code for r in statuses] == [500, 429, 200]
    assert fake.count("items") == 3


def test_a_script_may_repeat_until_cleared(fake: FakePlatform) -> None:
    fake.script("items", Reply.empty(503), times=None)
    assert [requests.post(fake.url("/items/1"), timeout=5).status_code for _ in range(3)] == [
        503
    ] * 3
    fake.clear_scripts("items")
    assert requests.post(fake.url("/items/1"), json={}, timeout=5).status_code == 200


def test_scripting_an_unknown_route_names_the_known_ones(fake: FakePlatform) -> None:
    with pytest.raises(KeyError, match="items"):
        fake.script("itemz", Reply.empty())


def test_headers_of_a_scripted_reply_reach_the_client(fake: FakePlatform) -> None:
    fake.script("items", Reply.json({"x": 1}, status=429, headers={"Retry-After": "12"}))
    response = requests.post(fake.url("/items/1"), timeout=5)
    assert response.headers["Retry-After"] == "12"


async def test_a_dropped_connection_gives_no_response(fake: FakePlatform) -> None:
    fake.script("items", Reply.dropped())
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.ClientError):
            async with session.post(fake.url("/items/1"), json={}) as response:
                await response.read()


def test_a_dropped_connection_fails_a_blocking_client(fake: FakePlatform) -> None:
    fake.script("items", Reply.dropped())
    with pytest.raises(requests.ConnectionError):
        requests.post(fake.url("/items/1"), json={}, timeout=5)


async def test_a_slow_reply_outlasts_a_short_client_timeout(fake: FakePlatform) -> None:
    fake.script("items", Reply.slow(3.0))
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=0.2)) as session:
        with pytest.raises(TimeoutError):
            async with session.post(fake.url("/items/1"), json={}) as response:
                await response.read()


def test_unmatched_requests_are_recorded_and_refused(fake: FakePlatform) -> None:
    response = requests.get(fake.url("/nowhere"), timeout=5)
    assert response.status_code == 404
    assert fake.last().route == UNMATCHED
    assert requests.get(fake.url("/items/1"), timeout=5).status_code == 404  # wrong method


async def test_wait_for_async_sees_requests_from_another_client(fake: FakePlatform) -> None:
    async with aiohttp.ClientSession() as session:
        for n in range(3):
            async with session.post(fake.url(f"/items/{n}"), json={}):
                pass
    seen = await fake.wait_for_async(3, "items", within=2.0)
    assert [r.params["id"] for r in seen] == ["0", "1", "2"]
    with pytest.raises(TimeoutError, match="3 of 4"):
        fake.wait_for(4, "items", timeout=0.05)


def test_reset_forgets_requests_and_scripts(fake: FakePlatform) -> None:
    fake.script("items", Reply.empty(500))
    requests.post(fake.url("/items/1"), timeout=5)
    fake.script("items", Reply.empty(500))
    fake.reset()
    assert fake.requests == []
    assert requests.post(fake.url("/items/1"), json={}, timeout=5).status_code == 200


def test_the_url_is_unavailable_before_start_and_after_stop() -> None:
    fake = FakePlatform()
    with pytest.raises(FakePlatformError, match="start"):
        _ = fake.base_url
    with fake:
        assert fake.base_url.startswith("http://127.0.0.1:")
        url = fake.url("/x")
    with pytest.raises(requests.ConnectionError):
        requests.get(url, timeout=2)
