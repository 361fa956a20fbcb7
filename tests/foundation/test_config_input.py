"""Config input nobody means to write (ADR 0070): nesting thousands deep, text no store can
carry, and store URLs with passwords, which come from the environment like any secret and are
masked wherever a URL is shown."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from click.testing import CliRunner

from bridge_core.cli import build_cli
from bridge_core.config import ConfigError, load_config, masked_url, parse_config
from bridge_core.plugins import LOAD_PLUGINS_VAR, ProviderRegistry, create_plugin_manager
from bridge_core.runtime.serve import config_secrets

PASSWORD = "hunter22secret"
PG_URL = f"postgresql://bridge:{PASSWORD}@db.internal:5432/bridge"
REDIS_URL = f"redis://:{PASSWORD}@cache.internal:6379/0"

BASE = """
[profiles.term]
provider = "console"
settings = { output = "none" }

[channels.ops]
profile = "term"
channel_id = "ops"
"""


@pytest.fixture(scope="module")
def providers() -> ProviderRegistry:
    return create_plugin_manager(load_entry_points=False).providers


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "bridge.toml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "nested",
    [
        "x = " + "[" * 5000 + "]" * 5000,
        "x = " + "{ a = " * 5000 + "1" + " }" * 5000,
        "[" + ".".join(["a"] * 5000) + "]\nb = 1",
    ],
    ids=["arrays", "inline tables", "dotted table header"],
)
def test_a_file_nested_thousands_deep_is_a_clear_error(
    tmp_path: Path, providers: ProviderRegistry, nested: str
) -> None:
    path = write(tmp_path, BASE + "\n[notify]\n" + nested + "\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path, providers=providers)
    assert str(path) in str(caught.value)
    assert "nested" in str(caught.value)


def test_chatbridge_check_says_so_without_a_traceback(tmp_path: Path) -> None:
    path = write(tmp_path, BASE + "\n[notify]\nx = " + "[" * 5000 + "]" * 5000 + "\n")
    result = CliRunner(env={LOAD_PLUGINS_VAR: ""}).invoke(build_cli(), ["check", "-c", str(path)])
    assert result.exit_code != 0
    assert "nested" in result.output
    assert "Traceback" not in result.output and "RecursionError" not in result.output
    assert not isinstance(result.exception, RecursionError)


def test_data_nested_deeper_than_any_config_is_refused_naming_where(
    providers: ProviderRegistry,
) -> None:
    deep: dict[str, object] = {"leaf": 1}
    for _ in range(5000):
        deep = {"a": deep}
    with pytest.raises(ConfigError) as caught:
        parse_config(
            {"profiles": {"term": {"provider": "console", "settings": deep}}}, providers=providers
        )
    (problem,) = caught.value.problems
    assert problem.key == "profiles"
    assert "profiles.term.settings.a" in problem.message and "32" in problem.message


@pytest.mark.parametrize(
    ("toml", "key"),
    [
        (
            '[channels.ops]\nprofile = "term"\nchannel_id = "o\\u0000ps"\n',
            "channels.ops.channel_id",
        ),
        (
            '[profiles.term]\nprovider = "console"\nsettings = { inbound_author = "a\\u0000" }\n',
            "profiles.term.settings.inbound_author",
        ),
    ],
)
def test_a_nul_in_the_file_is_refused_naming_the_key(
    tmp_path: Path, providers: ProviderRegistry, toml: str, key: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, toml), providers=providers)
    (problem,) = caught.value.problems
    assert problem.key == key and "NUL" in problem.message


def test_an_environment_variable_that_is_not_utf8_is_refused_naming_the_key(
    providers: ProviderRegistry,
) -> None:
    # os.environ keeps bytes that are not UTF-8 as lone surrogates
    data = {"api": {"token": {"env": "TOKEN"}}}
    with pytest.raises(ConfigError) as caught:
        parse_config(data, providers=providers, environ={"TOKEN": "abc\udcff"})
    (problem,) = caught.value.problems
    assert problem.key == "api.token"
    assert "TOKEN" in problem.message and "surrogate" in problem.message
    assert "abc" not in problem.message


def test_store_urls_come_from_the_environment(providers: ProviderRegistry) -> None:
    data = {"stores": {"ledger": {"env": "LEDGER_URL"}, "membership": {"env": "REDIS_URL"}}}
    config = parse_config(
        data, providers=providers, environ={"LEDGER_URL": PG_URL, "REDIS_URL": REDIS_URL}
    )
    assert config.stores.ledger_url == PG_URL
    assert config.stores.membership_url == REDIS_URL
    assert PASSWORD in config_secrets(config)
    with pytest.raises(ConfigError, match="LEDGER_URL is not set"):
        parse_config(data, providers=providers, environ={"REDIS_URL": REDIS_URL})


@pytest.mark.parametrize("from_env", [True, False], ids=["env", "in the file"])
def test_a_store_urls_password_is_masked_in_check_text_and_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, from_env: bool
) -> None:
    if from_env:
        monkeypatch.setenv("LEDGER_URL", PG_URL)
        monkeypatch.setenv("REDIS_URL", REDIS_URL)
        stores = '[stores]\nledger = { env = "LEDGER_URL" }\nmembership = { env = "REDIS_URL" }\n'
    else:
        stores = f'[stores]\nledger = "{PG_URL}"\nmembership = "{REDIS_URL}"\n'
    path = write(tmp_path, BASE + stores)
    runner = CliRunner(env={LOAD_PLUGINS_VAR: ""})
    text = runner.invoke(build_cli(), ["check", "-c", str(path)])
    as_json = runner.invoke(build_cli(), ["check", "--json", "-c", str(path)])
    assert text.exit_code == 0 and as_json.exit_code == 0, text.output
    for output in (text.output, as_json.output):
        assert PASSWORD not in output
    assert "postgresql://bridge:***@db.internal:5432/bridge" in text.output
    view = json.loads(as_json.output)
    assert view["stores"]["ledger"] == "postgresql://bridge:***@db.internal:5432/bridge"
    assert view["stores"]["membership"] == "redis://:***@cache.internal:6379/0"


def test_a_url_refused_by_the_config_does_not_echo_its_password(
    providers: ProviderRegistry,
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(
            {
                "stores": {
                    "ledger": f"mysql://u:{PASSWORD}@h/db",
                    "membership": f"amqp://u:{PASSWORD}@h",
                }
            },
            providers=providers,
        )
    assert PASSWORD not in str(caught.value)
    assert "mysql://u:***@h/db" in str(caught.value)


def test_logs_and_startup_errors_never_show_the_password(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Redis on a port nothing listens on: the gateway cannot start and says where it tried
    monkeypatch.setenv("REDIS_URL", f"redis://:{PASSWORD}@127.0.0.1:1/0")
    agent = 'agent = "bridge_core.runtime.agents:echo_agent"\n'
    path = write(tmp_path, BASE + agent + '[stores]\nmembership = { env = "REDIS_URL" }\n')
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    try:
        result = CliRunner(env={LOAD_PLUGINS_VAR: ""}).invoke(
            build_cli(), ["run", "-c", str(path), "--port", "0"]
        )
    finally:  # the CLI installed its own handler
        root.handlers[:], root.level = saved[0], saved[1]
    assert result.exit_code != 0
    assert "cannot reach Redis at redis://:***@127.0.0.1:1/0" in result.output
    assert PASSWORD not in result.output


def test_masked_url_masks_only_a_password() -> None:
    assert masked_url(PG_URL) == "postgresql://bridge:***@db.internal:5432/bridge"
    assert masked_url("postgresql://bridge@db/x") == "postgresql://bridge@db/x"
    assert masked_url("state/ledger.sqlite3") == "state/ledger.sqlite3"
    assert masked_url("redis://:p@h:1/0") == "redis://:***@h:1/0"
