"""Logging never shows a secret; agent references fail with a message that says what to do."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from bridge_core.config import parse_config
from bridge_core.plugins import create_plugin_manager
from bridge_core.runtime import AgentLoadError, load_agent
from bridge_core.runtime.logs import configure_logging, url_secrets
from bridge_core.runtime.serve import config_secrets

TOKEN = "xoxb-000000000000-super-secret-value"


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)


def test_secrets_are_redacted_in_text_and_json(restore_logging: None) -> None:
    for fmt in ("text", "json"):
        out = io.StringIO()
        configure_logging(fmt=fmt, stream=out, secrets=[TOKEN, "pw"])  # type: ignore[arg-type]
        log = logging.getLogger("test.redaction")
        log.warning("calling with token %s", TOKEN)
        try:
            raise RuntimeError(f"401 for {TOKEN}")
        except RuntimeError:
            log.exception("failed")
        text = out.getvalue()
        assert TOKEN not in text
        assert text.count("***") == 2
        assert "401 for ***" in text
        if fmt == "json":
            records = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
            assert [r["level"] for r in records] == ["warning", "error"]
            assert "401 for ***" in records[1]["exc"]


def test_config_secrets_cover_env_values_tokens_and_url_passwords(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CHATBRIDGE_LOAD_PLUGINS", "")
    config = parse_config(
        {
            "profiles": {"con": {"provider": "console"}},
            "stores": {"ledger": "postgresql://bridge:hunter22@db.internal/bridge"},
            "api": {"token": {"env": "API_TOKEN"}},
        },
        providers=create_plugin_manager().providers,
        environ={"API_TOKEN": TOKEN},
    )
    assert set(config_secrets(config)) == {TOKEN, "hunter22"}
    assert url_secrets("redis://:s3cr3t@host:6379/0") == ["s3cr3t"]
    assert url_secrets("redis://host:6379/0") == []


@pytest.mark.parametrize(
    ("reference", "words"),
    [
        ("no_colon", "must be 'module:function'"),
        ("no_such_module_xyz:f", "cannot import"),
        ("bridge_core.runtime.agents:nothing_here", "has no 'nothing_here'"),
        ("bridge_core.runtime.agents:BUSY_NOTICE", "not callable"),
        ("bridge_core.runtime.agents:load_agent", "must be an async function"),
    ],
)
def test_bad_agent_references(reference: str, words: str) -> None:
    with pytest.raises(AgentLoadError, match=words):
        load_agent(reference)


def test_an_agent_reference_loads() -> None:
    from bridge_core.runtime.agents import echo_agent

    assert load_agent("bridge_core.runtime.agents:echo_agent") is echo_agent
