"""Reading a platform's "retry after" into seconds: one parser for every provider.

``Retry-After`` comes as delta-seconds (``"30"``, Discord's ``"1.5"``), as an HTTP date
(``"Wed, 21 Oct 2026 07:28:00 GMT"``), or in a JSON body as a number (Discord's ``retry_after``,
Matrix's ``retry_after_ms`` divided by 1,000). Platforms and proxies also send garbage (``""``,
``"soon"``, ``"-5"``, ``"nan"``, ``"inf"``, ``1e308``). Whatever comes in, the answer is a finite
number of seconds in ``[0, MAX_RETRY_AFTER]`` or ``None`` (the core then backs off on its own,
ADR 0064): a ``RateLimited`` built from it can never carry a wait that breaks a sleep or stalls a
channel for years.
"""

from __future__ import annotations

import email.utils
import math
import time
from collections.abc import Mapping
from datetime import UTC
from typing import Any

from bridge_core.provider import RETRY_AFTER_LIMIT

__all__ = ["MAX_RETRY_AFTER", "parse_retry_after", "retry_after_header"]

MAX_RETRY_AFTER = RETRY_AFTER_LIMIT
"""The longest wait taken from a platform: an hour, the longest window any supported platform
documents (Teams' 1,800 sends an hour), and the most a ``RateLimited`` accepts (ADR 0027). A
longer announced wait is read as this one; the call after it learns whether the platform still
refuses."""


def parse_retry_after(
    value: object, *, now: float | None = None, scale: float = 1.0
) -> float | None:
    """Seconds to wait, from a ``Retry-After`` header value or a JSON number.

    Numbers (``int``, ``float``, or text such as ``"30"``, ``" 1.5 "``) are seconds, times
    ``scale`` (``0.001`` for Matrix's ``retry_after_ms``); text that is not a number is read as an
    HTTP date, relative to ``now`` (epoch seconds, default the clock).
    Negative, non-finite, boolean and unreadable values give ``None``; a date in the past gives
    ``0.0``; anything over ``MAX_RETRY_AFTER`` gives ``MAX_RETRY_AFTER``.
    """
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, bytes):
        try:
            value = value.decode("ascii")
        except UnicodeDecodeError:
            return None
    if isinstance(value, int):
        return _seconds(float(min(value, 2**53)) * scale)  # float() overflows past 1e308
    if isinstance(value, float):
        return _seconds(value * scale)
    if not isinstance(value, str):
        return None
    text = value.strip()
    if not text:
        return None
    try:
        return _seconds(float(text) * scale)
    except ValueError:
        pass
    # float() reads "nan" and "inf"; an HTTP date never parses as a float.
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # RFC 9110 dates are GMT; a date without a zone is read as UTC
        when = when.replace(tzinfo=UTC)
    delta = when.timestamp() - (time.time() if now is None else now)
    return _seconds(max(0.0, delta))


def retry_after_header(
    headers: Mapping[str, Any] | None, *, now: float | None = None
) -> float | None:
    """``parse_retry_after`` of the ``Retry-After`` header in ``headers``, matched without regard
    to case (a plain ``dict`` as slack-sdk hands it, aiohttp's or requests' header mappings)."""
    if not headers:
        return None
    for key, value in headers.items():
        if isinstance(key, str) and key.lower() == "retry-after":
            return parse_retry_after(value, now=now)
    return None


def _seconds(seconds: float) -> float | None:
    if not math.isfinite(seconds) or seconds < 0:
        return None
    return min(seconds, MAX_RETRY_AFTER)
