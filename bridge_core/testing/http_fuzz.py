"""Fuzzing an HTTP boundary of the gateway over full Unicode (ADR 0070), with hypothesis.

Strategies for what a careless client or an attacker sends (text with lone surrogates, NUL and
control characters; JSON nested thousands deep; bodies that are not UTF-8, not JSON or larger
than the limit; header bytes that are not UTF-8) and the one check every answer must pass:
2xx or 4xx with a reason, never a 5xx. ``serve_in_thread`` runs a gateway (any async context
manager) on its own event loop, so a synchronous ``@given`` test can send it real requests.

Needs ``hypothesis`` (a test dependency of bridge-core).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import AbstractAsyncContextManager, contextmanager
from typing import Any, TypeVar

import anyio.from_thread
import httpx
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

__all__ = [
    "ANY_TEXT",
    "assert_answered",
    "bodies",
    "fuzz_settings",
    "header_values",
    "json_values",
    "serve_in_thread",
]

T = TypeVar("T")

# Every code point, surrogates included (hypothesis leaves them out unless told), NUL and the
# C0/C1 controls among them, and the few that break things most, often.
ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=24) | st.sampled_from(
    ["x\ud800", "\udfff", "\udc00\ud800", "a\0b", "\x1b]0;t\x07", "\x9b2J", "😀", ""]
)


def json_values(*, max_leaves: int = 12) -> st.SearchStrategy[Any]:
    """Any JSON value whose strings (keys too) are ``ANY_TEXT``."""
    scalars = st.none() | st.booleans() | st.integers() | st.floats() | ANY_TEXT
    return st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(ANY_TEXT, inner, max_size=4),
        max_leaves=max_leaves,
    )


def _encode(value: Any, raw: bool) -> bytes:
    if raw:  # lone surrogates written as their (invalid) UTF-8 bytes, not as \ud800 escapes
        return json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")
    return json.dumps(value).encode("ascii")


def bodies(shapes: st.SearchStrategy[Any], *, max_body: int) -> st.SearchStrategy[bytes]:
    """Request bodies: ``shapes`` (what the route expects, with fuzzed fields) as JSON, escaped
    or as raw bytes; any JSON; nesting thousands deep; bytes that are not UTF-8 or not JSON;
    and bodies just over ``max_body``."""
    # built as bytes: json.dumps itself recurses, and would stop at a thousand levels
    deep = st.builds(
        lambda depth, leaf: b"[" * depth + json.dumps(leaf).encode("ascii") + b"]" * depth,
        st.integers(1, 20_000),
        ANY_TEXT,
    )
    too_large = st.builds(lambda extra: b'"' + b"x" * (max_body + extra) + b'"', st.integers(0, 9))
    escaped = st.builds(_encode, shapes, st.just(False))
    return st.one_of(
        escaped,  # most often what the route expects, so its fields get past the first checks
        escaped,
        escaped,
        st.builds(_encode, shapes, st.just(True)),
        st.builds(_encode, json_values(), st.booleans()),
        deep,
        st.binary(max_size=64),
        too_large,
    )


# What an HTTP client sends in a header value (h11 refuses the rest): tab, printable ASCII and
# every byte from 0x80 up, most of which are not UTF-8; no whitespace at either end.
_HEADER_BYTES = [9, *range(0x20, 0x7F), *range(0x80, 0x100)]
header_values = (
    st.lists(st.sampled_from(_HEADER_BYTES), max_size=24)
    .map(bytes)
    .map(lambda raw: raw.strip(b" \t") or b"x")
)


def fuzz_settings(max_examples: int) -> settings:
    """Settings for a ``@given`` test against a served gateway: no deadline (a real request's time
    varies with the machine's load) and one gateway shared by every example."""
    return settings(
        max_examples=max_examples,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


def assert_answered(response: httpx.Response) -> None:
    """2xx, 3xx or 4xx; a 4xx says why in its body. Never a 5xx."""
    assert response.status_code < 500, (response.status_code, response.text[:500])
    if response.status_code >= 400:
        assert response.content.strip(), f"a {response.status_code} without a reason"


@contextmanager
def serve_in_thread(server: AbstractAsyncContextManager[T]) -> Iterator[T]:
    """Enter ``server`` (a ``Gateway``) on an asyncio loop in a thread until the block ends."""
    with anyio.from_thread.start_blocking_portal("asyncio") as portal:
        with portal.wrap_async_context_manager(server) as running:
            yield running
