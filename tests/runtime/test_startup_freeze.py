"""``chatbridge run`` freezes what start-up built once the gateway serves (ADR 0156); a program
that embeds a ``Gateway`` keeps its own collector settings."""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from click.testing import CliRunner

from bridge_core.cli import build_cli
from bridge_core.commands import run
from bridge_core.config import load_config
from bridge_core.runtime.gateway import Gateway
from bridge_core.runtime.serve import serve

CONFIG = """
[profiles.con]
provider = "console"
settings = {{ transcript = "{transcript}", output = "none", budget = "unlimited" }}

[channels.ops]
profile = "con"
channel_id = "ops"

[stores]
ledger = "{ledger}"

[api]
port = 0
"""


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "bridge.toml"
    path.write_text(
        CONFIG.format(transcript=tmp_path / "t.jsonl", ledger=tmp_path / "bridge.sqlite3")
    )
    return path


@pytest.fixture
def unfrozen() -> Iterator[None]:
    """The test process's collector as it was: nothing frozen before, nothing kept after."""
    gc.unfreeze()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    gc.unfreeze()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)


def test_run_freezes_the_startup_objects_once_the_gateway_serves(
    config_file: Path,
    unfrozen: None,
    builtin_plugins_only: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    frozen: dict[str, int] = {}

    async def fake_serve(
        gateway: Gateway, *, on_ready: Callable[[Gateway], None], **_: Any
    ) -> None:
        frozen["starting"] = gc.get_freeze_count()
        on_ready(gateway)
        frozen["serving"] = gc.get_freeze_count()

    monkeypatch.setattr(run, "serve", fake_serve)
    monkeypatch.setattr(run, "exit_process", lambda code: None)
    # Through the group, as a user runs it: click caches a command's help option the first
    # time it is asked for, so invoking the bare command would leave `run` without `-h`.
    result = CliRunner().invoke(build_cli(), ["run", "-c", str(config_file)])
    assert result.exit_code == 0, result.output
    assert frozen["starting"] == 0  # nothing is frozen while the gateway starts
    assert frozen["serving"] > 10_000  # the modules, plugins and config, once it serves


@pytest.mark.anyio
async def test_a_gateway_served_as_a_library_freezes_nothing(
    config_file: Path, unfrozen: None, builtin_plugins_only: None
) -> None:
    gateway = Gateway(load_config(config_file))
    served = anyio.Event()

    def ready(started: Gateway) -> None:
        served.set()
        started.stop()

    await serve(gateway, handle_signals=False, on_ready=ready)
    assert served.is_set()
    assert gc.get_freeze_count() == 0
