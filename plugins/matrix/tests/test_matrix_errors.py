"""The errcode table and the fallbacks on the status, as the homeserver answers them."""

from __future__ import annotations

import httpx
import pytest
from bridge_matrix import ERROR_CODES
from bridge_matrix.errors import map_error, retry_after_of

from bridge_core import (
    Forbidden,
    MessageRejected,
    NotFound,
    ProviderError,
    RateLimited,
    TransportError,
    Unreachable,
)

UNKNOWN_EVENT = "Can't send relation to unknown event"  # Synapse 1.163's words, errcode M_UNKNOWN


@pytest.mark.parametrize("errcode", sorted(ERROR_CODES))
def test_every_errcode_in_the_table_maps_to_its_class(errcode: str) -> None:
    kind, _ = ERROR_CODES[errcode]
    body = {"errcode": errcode, "error": "x"}
    error = map_error(status=400, body=body, headers=None, operation="edit", where="w")
    assert type(error) is kind


@pytest.mark.parametrize(
    ("status", "body", "operation", "expected"),
    [
        (404, {"errcode": "M_NOT_FOUND"}, "post", Unreachable),
        (404, {"errcode": "M_NOT_FOUND"}, "edit", NotFound),
        (404, {"errcode": "M_NOT_FOUND"}, "history", NotFound),  # one room's, skipped
        (404, None, "history", NotFound),
        (401, {"errcode": "M_UNKNOWN_TOKEN"}, "history", Unreachable),
        (401, None, "history", Unreachable),
        (403, {"errcode": "M_USER_DEACTIVATED"}, "history", Unreachable),
        (400, {"errcode": "M_UNRECOGNIZED"}, "history", NotFound),  # every room's gap skipped
        (405, None, "history", NotFound),
        (410, {"errcode": "M_SOMETHING_NEW"}, "history", NotFound),
        (404, {"errcode": "M_NOT_FOUND"}, "sync", Unreachable),
        (403, {"errcode": "M_SOMETHING_NEW"}, "post", Forbidden),
        (401, None, "post", Unreachable),
        (413, {"errcode": "M_SOMETHING_NEW"}, "post", MessageRejected),
        (400, {"errcode": "M_UNKNOWN", "error": "bad relation"}, "post", MessageRejected),
        (400, {"errcode": "M_UNKNOWN", "error": UNKNOWN_EVENT}, "post", NotFound),
        (400, {"errcode": "M_UNKNOWN", "error": UNKNOWN_EVENT}, "edit", NotFound),
        (500, {"errcode": "M_UNKNOWN"}, "post", TransportError),
        (502, None, "edit", TransportError),
        (408, None, "post", TransportError),
        (408, {}, "edit", TransportError),
        (425, None, "post", TransportError),
        (418, None, "post", Unreachable),
    ],
)
def test_unlisted_answers_fall_back_on_the_status(
    status: int, body: object, operation: str, expected: type[ProviderError]
) -> None:
    error = map_error(
        status=status,
        body=body,
        headers=None,
        operation=operation,  # type: ignore[arg-type]
        where="post to room !r",
    )
    assert type(error) is expected
    assert f"HTTP {status}" in str(error) and "room !r" in str(error)


def test_retry_after_prefers_the_bodys_milliseconds_then_the_header() -> None:
    headers = httpx.Headers({"Retry-After": "3"})
    assert retry_after_of(429, headers, {"retry_after_ms": 1250}) == 1.25
    assert retry_after_of(429, headers, {"errcode": "M_LIMIT_EXCEEDED"}) == 3.0
    assert retry_after_of(429, httpx.Headers(), {}) is None
    assert retry_after_of(429, httpx.Headers({"Retry-After": "soon"}), {}) is None
    assert retry_after_of(429, httpx.Headers(), {"retry_after_ms": True}) is None
    limited = map_error(
        status=429,
        body={"errcode": "M_LIMIT_EXCEEDED", "retry_after_ms": 500},
        headers=None,
        operation="post",
        where="w",
    )
    assert isinstance(limited, RateLimited) and limited.retry_after == 0.5
