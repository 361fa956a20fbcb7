"""Real Redis and PostgreSQL for tests: skip when absent, fail instead under CI.

``.ci/run`` sets ``BRIDGE_REQUIRE_SERVICES=1``, which turns "service not available" into a test
failure, so CI can never pass by skipping the tests that need the real servers.
"""

from __future__ import annotations

import os
import socket

import pytest

__all__ = [
    "POSTGRES_URL",
    "REDIS_URL",
    "REQUIRE_SERVICES_VAR",
    "require_postgres",
    "require_redis",
    "service_unavailable",
]

REQUIRE_SERVICES_VAR = "BRIDGE_REQUIRE_SERVICES"
REDIS_URL = os.environ.get("BRIDGE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
POSTGRES_URL = os.environ.get(
    "BRIDGE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)


def _answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def service_unavailable(what: str) -> None:
    """Skip the current test, or fail it when the environment requires the services."""
    message = f"{what} is not available"
    if os.environ.get(REQUIRE_SERVICES_VAR, "") not in ("", "0"):
        pytest.fail(f"{message}, and {REQUIRE_SERVICES_VAR} is set: CI must not skip it")
    pytest.skip(message)


def require_redis() -> str:
    """The Redis URL for tests; skips (or fails under CI) when Redis does not answer."""
    if not _answers("127.0.0.1", 6379):
        service_unavailable("Redis at 127.0.0.1:6379")
    return REDIS_URL


def require_postgres() -> str:
    """The PostgreSQL URL for tests; skips (or fails under CI) when PostgreSQL does not answer."""
    if not _answers("127.0.0.1", 5432):
        service_unavailable("PostgreSQL at 127.0.0.1:5432")
    return POSTGRES_URL
