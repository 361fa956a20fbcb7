from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bridge_core.providers.console import ConsoleProvider, ConsoleSettings
from bridge_core.testing.clock import anyio_backend

__all__ = ["anyio_backend", "console"]


@pytest.fixture
async def console(tmp_path: Path) -> AsyncIterator[ConsoleProvider]:
    """A console provider writing its transcript to ``t.jsonl``, closed after the test."""
    provider = ConsoleProvider(
        ConsoleSettings(transcript=tmp_path / "t.jsonl", output="none"), run_prefix="r"
    )
    yield provider
    await provider.aclose()
