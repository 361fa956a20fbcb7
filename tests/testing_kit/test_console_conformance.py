"""The built-in console provider runs the same conformance suite as every plugin.

It has no platform, so the harness observes it through its JSON Lines transcript and scripts
faults on the instance the suite built (``ConsoleProvider.script_fault``).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from bridge_core.hookspecs import ProviderContext, ProviderType
from bridge_core.provider import (
    Forbidden,
    MessageRejected,
    NotFound,
    ProviderError,
    RateLimited,
    TransportError,
    Unreachable,
)
from bridge_core.providers import console
from bridge_core.providers.console import ConsoleProvider
from bridge_core.testing.conformance import (
    ConformanceHarness,
    Fault,
    Operation,
    ProviderConformance,
)

CHANNEL = "ops"
RETRY_AFTER = 30.0

_ERRORS: dict[Fault, ProviderError] = {
    Fault.RATE_LIMITED: RateLimited("console slow down", retry_after=RETRY_AFTER),
    Fault.NOT_FOUND: NotFound("console message gone"),
    Fault.FORBIDDEN: Forbidden("console channel closed"),
    Fault.UNREACHABLE: Unreachable("console channel deleted"),
    Fault.REJECTED: MessageRejected("console refused this message"),
    Fault.SERVER_ERROR: TransportError("console 5xx"),
    Fault.DROPPED: TransportError("console connection dropped"),
    Fault.SLOW: TransportError("console timeout"),
}


def _console_type() -> ProviderType:
    found: list[ProviderType] = []
    console.register_providers(register=found.append)
    (kind,) = found
    return kind


def _current_texts(transcript: Path, channel: str) -> list[str]:
    texts: dict[str, str] = {}
    if not transcript.exists():
        return []
    for line in transcript.read_text(encoding="utf-8").splitlines():
        entry = json.loads(line)
        if entry["channel"] != channel or entry["op"] not in ("post", "edit"):
            continue
        texts[entry["message_id"]] = entry["text"]
    return list(texts.values())


class TestConsoleConformance(ProviderConformance):
    @pytest.fixture
    def harness(self, tmp_path: Path) -> ConformanceHarness:
        transcript = tmp_path / "transcript.jsonl"
        built: list[ConsoleProvider] = []
        kind = _console_type()

        def factory(settings: Any, context: ProviderContext) -> ConsoleProvider:
            provider = kind.factory(settings, context)
            assert isinstance(provider, ConsoleProvider)
            built.append(provider)
            return provider

        def script_fault(fault: Fault, operation: Operation) -> float | None:
            built[-1].script_fault(CHANNEL, _ERRORS[fault])
            return RETRY_AFTER if fault is Fault.RATE_LIMITED else None

        return ConformanceHarness(
            provider_type=dataclasses.replace(kind, factory=factory),
            settings={"transcript": str(transcript), "output": "none"},
            channel=CHANNEL,
            script_fault=script_fault,
            delivered=lambda channel: _current_texts(transcript, channel),
            plugin=console,
        )
