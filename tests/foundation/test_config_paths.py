"""Relative paths in a provider's settings are relative to the config file's folder, as
``stores.ledger`` is, whatever folder the gateway runs from (ADR 0063)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bridge_slack import SLACK_BUDGET
from pydantic import BaseModel, ConfigDict

from bridge_core.config import load_config, parse_config
from bridge_core.hookspecs import ProviderContext, ProviderType
from bridge_core.plugins import ProviderRegistry, RegisteredProvider, create_plugin_manager
from bridge_core.provider import Capabilities, ChatProvider
from bridge_core.providers.console import ConsoleSettings

pytestmark = pytest.mark.anyio

CONSOLE_CONFIG = """
[profiles.term]
provider = "console"
settings = { output = "none", transcript = "logs/transcript.jsonl", inbound = "typed.txt" }

[profiles.stdin]
provider = "console"
settings = { output = "none", transcript = "ABSOLUTE", inbound = "-" }

[stores]
ledger = "bridge.sqlite3"
"""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """The config's folder, and another folder the process runs from."""
    config_folder, elsewhere = tmp_path / "conf", tmp_path / "elsewhere"
    config_folder.mkdir()
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    return config_folder, elsewhere


async def test_the_console_transcript_is_written_beside_the_config(
    folders: tuple[Path, Path], tmp_path: Path
) -> None:
    config_folder, elsewhere = folders
    absolute = tmp_path / "abs" / "t.jsonl"
    config_file = config_folder / "bridge.toml"
    config_file.write_text(CONSOLE_CONFIG.replace("ABSOLUTE", str(absolute)))
    (config_folder / "typed.txt").write_text("hello from the file\n")
    providers = create_plugin_manager(load_entry_points=False).providers
    # Loaded through a relative path from the other folder, as `chatbridge run -c ../conf/...`.
    config = load_config(Path("..") / "conf" / "bridge.toml", providers=providers)

    term = config.profiles["term"].settings
    assert isinstance(term, ConsoleSettings)
    assert term.transcript == Path("../conf/logs/transcript.jsonl")
    assert term.inbound == Path("../conf/typed.txt")
    assert config.stores.ledger_path == Path("../conf/bridge.sqlite3"), (
        "the same rule as the ledger"
    )
    other = config.profiles["stdin"].settings
    assert isinstance(other, ConsoleSettings)
    assert other.transcript == absolute and other.inbound == "-"

    console = providers.get("console")
    async with console.factory(term, ProviderContext(profile="term")) as provider:
        await provider.post("ops", "where does this go?")
        received: list[str] = []

        async def sink(message: object) -> None:
            received.append(getattr(message, "text", ""))

        await provider.receive(sink)
    assert received == ["hello from the file"]
    lines = (config_folder / "logs" / "transcript.jsonl").read_text().splitlines()
    assert json.loads(lines[0])["text"] == "where does this go?"
    assert not (elsewhere / "logs").exists(), "nothing is written relative to the working folder"


class _Output(BaseModel):
    model_config = ConfigDict(frozen=True)

    file: Path
    label: str


class _PathSettings(BaseModel):
    """A plugin's settings with paths at several depths, one not typed as a path."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key_file: Path
    optional: Path | None = None
    outputs: list[_Output] = []
    by_name: dict[str, Path] = {}
    pair: tuple[Path, Path] | None = None
    plain: str = "not/a/path"


def _registry() -> ProviderRegistry:
    provider = ProviderType(
        name="paths",
        capabilities=Capabilities(edit=True, max_length=100),
        budget=SLACK_BUDGET,
        settings_model=_PathSettings,
        factory=lambda settings, context: ChatProvider(),
    )
    return ProviderRegistry([RegisteredProvider(provider, "bridge-paths", "1.0")])


def test_any_plugins_path_settings_resolve_at_any_depth(tmp_path: Path) -> None:
    data = {
        "profiles": {
            "p": {
                "provider": "paths",
                "settings": {
                    "key_file": "keys/bot.pem",
                    "outputs": [
                        {"file": "out/a.log", "label": "a"},
                        {"file": "/abs/b.log", "label": "b"},
                    ],
                    "by_name": {"x": "x.txt"},
                    "pair": ["one", "/two"],
                },
            }
        }
    }
    config = parse_config(data, path=tmp_path / "bridge.toml", providers=_registry())
    settings = config.profiles["p"].settings
    assert isinstance(settings, _PathSettings)
    assert settings.key_file == tmp_path / "keys" / "bot.pem"
    assert settings.optional is None
    assert settings.outputs == [
        _Output(file=tmp_path / "out" / "a.log", label="a"),
        _Output(file=Path("/abs/b.log"), label="b"),
    ]
    assert settings.by_name == {"x": tmp_path / "x.txt"}
    assert settings.pair == (tmp_path / "one", Path("/two"))
    assert settings.plain == "not/a/path", "a setting typed str is never taken for a path"


def test_without_a_file_paths_stay_as_given() -> None:
    data = {"profiles": {"p": {"provider": "paths", "settings": {"key_file": "keys/bot.pem"}}}}
    settings = parse_config(data, providers=_registry()).profiles["p"].settings
    assert isinstance(settings, _PathSettings)
    assert settings.key_file == Path("keys/bot.pem")
