"""Real Redis and PostgreSQL for tests: skip when absent, fail instead under CI.

``.ci/run`` sets ``BRIDGE_REQUIRE_SERVICES=1``, which turns "service not available" into a test
failure, so CI can never pass by skipping the tests that need the real servers.

Where they are: ``BRIDGE_TEST_REDIS_URL`` (default ``redis://127.0.0.1:6379/15``: database 15, not
the 0 an application on the same machine most likely uses) and ``BRIDGE_TEST_POSTGRES_URL``
(default ``postgresql://postgres@127.0.0.1:5432/test``, the database ``.ci/run`` makes sure of).
Every test keeps to its own key prefix or table prefix there, and a test is skipped (failed under
CI) when the host and port of its URL do not answer.
"""

from __future__ import annotations

import os
import socket
from urllib.parse import urlsplit

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
REDIS_URL = os.environ.get("BRIDGE_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
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


def _where(url: str, default_port: int) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or default_port


def require_redis() -> str:
    """The Redis URL for tests; skips (or fails under CI) when Redis does not answer."""
    host, port = _where(REDIS_URL, 6379)
    if not _answers(host, port):
        service_unavailable(f"Redis at {host}:{port} (BRIDGE_TEST_REDIS_URL)")
    return REDIS_URL


def require_postgres() -> str:
    """The PostgreSQL URL for tests; skips (or fails under CI) when PostgreSQL does not answer."""
    host, port = _where(POSTGRES_URL, 5432)
    if not _answers(host, port):
        service_unavailable(f"PostgreSQL at {host}:{port} (BRIDGE_TEST_POSTGRES_URL)")
    return POSTGRES_URL
