"""One parser for every platform's Retry-After: seconds, HTTP dates, garbage."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge_core.retry_after import MAX_RETRY_AFTER, parse_retry_after, retry_after_header

NOW = 1_790_000_000.0  # 2026-09-21T14:13:20Z


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("30", 30.0),
        (" 1.5 ", 1.5),
        ("0", 0.0),
        (b"12", 12.0),
        (2, 2.0),
        (0.25, 0.25),
        ("1e3", 1000.0),
        ("1e308", MAX_RETRY_AFTER),
        (10**400, MAX_RETRY_AFTER),  # an int too large for a float
        ("99999999", MAX_RETRY_AFTER),
        ("-5", None),
        (-0.5, None),
        ("nan", None),
        ("NaN", None),
        ("inf", None),
        ("-inf", None),
        (math.nan, None),
        (math.inf, None),
        (True, None),
        (None, None),
        ("", None),
        ("   ", None),
        ("soon", None),
        ("30s", None),
        (b"\xff\xfe", None),
        ([30], None),
        ({"retry_after": 3}, None),
        ("Mon, 21 Sep 2026 14:13:50 GMT", 30.0),
        ("Mon, 21 Sep 2026 14:13:50", 30.0),  # no zone: GMT, as RFC 9110 says
        ("Mon, 21 Sep 2026 16:13:50 +0200", 30.0),
        ("Mon, 21 Sep 2026 14:00:00 GMT", 0.0),  # in the past
        ("Mon, 21 Sep 2099 14:00:00 GMT", MAX_RETRY_AFTER),
        ("Mon, 99 Foo 2026 99:99:99 GMT", None),
    ],
)
def test_parse_retry_after(value: object, expected: float | None) -> None:
    assert parse_retry_after(value, now=NOW) == expected


def test_the_header_is_found_in_any_case() -> None:
    assert retry_after_header({"retry-after": "4"}) == 4.0
    assert retry_after_header({"Content-Type": "x", "RETRY-AFTER": "nan"}) is None
    assert retry_after_header({"Content-Type": "x"}) is None
    assert retry_after_header(None) is None


@given(st.one_of(st.text(), st.binary(), st.floats(), st.integers(), st.none(), st.booleans()))
def test_anything_gives_a_sane_wait_or_none(value: object) -> None:
    seconds = parse_retry_after(value, now=NOW)
    assert seconds is None or (math.isfinite(seconds) and 0.0 <= seconds <= MAX_RETRY_AFTER)


def test_a_scale_reads_milliseconds_before_the_cap() -> None:
    # Matrix's retry_after_ms: 5,000,000 ms is 5,000 s (capped at the hour), 1,500 ms 1.5 s.
    assert parse_retry_after(1500, scale=0.001) == 1.5
    assert parse_retry_after("250", scale=0.001) == 0.25
    assert parse_retry_after(5_000_000, scale=0.001) == MAX_RETRY_AFTER
    assert parse_retry_after(-1, scale=0.001) is None
