"""The REST client and its error mapping, with respx standing in for the API."""

from __future__ import annotations

import email.utils
import time

import httpx
import pytest
import respx
from bridge_core import (
    Forbidden,
    MessageRejected,
    NotFound,
    ProviderError,
    RateLimited,
    TransportError,
    Unreachable,
)
from pydantic import SecretStr

from {{ cookiecutter.__package }}.client import ApiClient

BASE = "https://api.test.invalid/v1"
TOKEN = "respx-secret-token"

pytestmark = pytest.mark.anyio


def client() -> ApiClient:
    return ApiClient(base_url=BASE, token=SecretStr(TOKEN), timeout=2.0)


def failure(code: str, status: int, **headers: str) -> httpx.Response:
    return httpx.Response(status, json={"error": {"code": code, "message": code}}, headers=headers)


@respx.mock
async def test_post_sends_the_text_with_the_token_and_returns_the_id() -> None:
    route = respx.post(f"{BASE}/channels/C%2F1/messages").mock(
        return_value=httpx.Response(201, json={"id": "m42"})
    )
    api = client()
    try:
        message_id = await api.post_message("C/1", "hello", thread="t9")
    finally:
        await api.aclose()
    assert message_id == "m42"
    request = route.calls.last.request
    assert request.headers["Authorization"] == f"Bearer {TOKEN}"
    assert request.headers["Content-Type"] == "application/json"
    assert request.read() == b'{"text":"hello","thread_id":"t9"}'


@respx.mock
async def test_edit_patches_the_message() -> None:
    route = respx.patch(f"{BASE}/channels/C1/messages/m1").mock(
        return_value=httpx.Response(200, json={"id": "m1"})
    )
    api = client()
    try:
        assert await api.edit_message("C1", "m1", "new text") == "m1"
    finally:
        await api.aclose()
    assert route.calls.last.request.read() == b'{"text":"new text"}'


@respx.mock
async def test_a_429_with_retry_after_is_rate_limited_with_that_wait() -> None:
    respx.post(f"{BASE}/channels/C1/messages").mock(
        return_value=failure("rate_limited", 429, **{"Retry-After": "60"})
    )
    api = client()
    started = time.monotonic()
    try:
        with pytest.raises(RateLimited) as caught:
            await api.post_message("C1", "hello", thread=None)
    finally:
        await api.aclose()
    assert caught.value.retry_after == 60.0
    assert time.monotonic() - started < 30.0, "a rate limit is surfaced, never slept on"


@respx.mock
async def test_a_429_with_an_http_date_and_without_a_header() -> None:
    later = email.utils.formatdate(time.time() + 300, usegmt=True)
    respx.post(f"{BASE}/channels/C1/messages").mock(
        side_effect=[
            httpx.Response(429, headers={"Retry-After": later}),
            httpx.Response(429),
        ]
    )
    api = client()
    try:
        with pytest.raises(RateLimited) as dated:
            await api.post_message("C1", "one", thread=None)
        with pytest.raises(RateLimited) as bare:
            await api.post_message("C1", "two", thread=None)
    finally:
        await api.aclose()
    assert dated.value.retry_after is not None and 240.0 < dated.value.retry_after <= 300.0
    assert bare.value.retry_after is None


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        (failure("message_not_found", 404), NotFound),
        (failure("not_in_channel", 403), Forbidden),
        (failure("missing_permission", 403), Forbidden),
        (failure("channel_archived", 410), Unreachable),
        (failure("bot_blocked", 403), Unreachable),
        (failure("token_revoked", 401), Unreachable),
        (failure("text_too_long", 400), MessageRejected),
        (failure("invalid_request", 400), MessageRejected),
        (failure("service_unavailable", 503), TransportError),
        (httpx.Response(401), Unreachable),
        (httpx.Response(410), Unreachable),
        (httpx.Response(400), MessageRejected),
        (httpx.Response(413), MessageRejected),
        (httpx.Response(422), MessageRejected),
        (httpx.Response(403), Forbidden),
        (httpx.Response(404), NotFound),
        (httpx.Response(500, text="oops"), TransportError),
        (httpx.Response(502), TransportError),
        (httpx.Response(418), TransportError),
        (httpx.Response(200, text="not json"), TransportError),
        (httpx.Response(200, json={"no": "id"}), TransportError),
    ],
)
@respx.mock
async def test_every_answer_maps_onto_the_taxonomy(
    response: httpx.Response, expected: type[ProviderError]
) -> None:
    respx.patch(f"{BASE}/channels/C1/messages/m1").mock(return_value=response)
    api = client()
    try:
        with pytest.raises(expected) as caught:
            await api.edit_message("C1", "m1", "text")
    finally:
        await api.aclose()
    assert type(caught.value) is expected
    assert "edit of message m1 in channel C1" in str(caught.value)
    assert TOKEN not in str(caught.value)


@pytest.mark.parametrize(
    "failure_to_raise",
    [httpx.ConnectError("refused"), httpx.ReadTimeout("slow"), httpx.RemoteProtocolError("cut")],
)
@respx.mock
async def test_no_response_is_a_transport_error(failure_to_raise: httpx.HTTPError) -> None:
    respx.post(f"{BASE}/channels/C1/messages").mock(side_effect=failure_to_raise)
    api = client()
    try:
        with pytest.raises(TransportError):
            await api.post_message("C1", "hello", thread=None)
    finally:
        await api.aclose()


@pytest.mark.parametrize(
    ("header", "expected"), [("3", 3.0), ("1.5", 1.5), ("soon", None), ("nan", None)]
)
@respx.mock
async def test_a_429_carries_the_parsed_retry_after(header: str, expected: float | None) -> None:
    respx.post(f"{BASE}/channels/C1/messages").mock(
        return_value=httpx.Response(429, headers={"Retry-After": header})
    )
    api = client()
    try:
        with pytest.raises(RateLimited) as caught:
            await api.post_message("C1", "hello", thread=None)
    finally:
        await api.aclose()
    assert caught.value.retry_after == expected


def test_repr_hides_the_token() -> None:
    api = ApiClient(base_url=BASE, token=SecretStr(TOKEN), timeout=1.0)
    assert TOKEN not in repr(api)
