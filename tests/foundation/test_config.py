"""Config: one TOML file, resolved secrets, budgets, and errors that name the file and the key."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import bridge_discord.plugin
import bridge_slack.plugin
import bridge_teams.plugin
import pytest
from bridge_discord import DISCORD_BUDGET
from bridge_slack import SLACK_BUDGET
from bridge_teams import TEAMS_BUDGET
from pydantic import BaseModel, ConfigDict, field_validator

from bridge_core import events
from bridge_core.config import (
    CONFIG_ENV_VAR,
    BridgeConfig,
    BudgetNumbers,
    ConfigError,
    Secret,
    config_path,
    known_event_kinds,
    load_config,
    masked,
    parse_config,
    resolve_budget,
)
from bridge_core.hookspecs import ProviderType, hookimpl
from bridge_core.plugins import ProviderRegistry, RegisteredProvider, create_plugin_manager
from bridge_core.provider import UNLIMITED_BUDGET, Capabilities, ChatProvider, SendBudget, Window
from bridge_core.providers.console import ConsoleSettings

FULL = """
[profiles.term]
provider = "console"
budget = "teams"
settings = { output = "none", inbound_author = "ana" }

[profiles.term2]
provider = "console"
budget = { burst = 2, per_hour = 600, edit_spacing = 3.0 }

[channels.ops]
profile = "term"
channel_id = "C-OPS"
thread = "T1"
kinds = ["AgentFinished", "AgentGone"]
workspaces = ["alpha"]
agent = "my_agents.ops:answer"
notify = { hold = 0.5 }

[channels.dev]
profile = "term2"
channel_id = "C-DEV"

[stores]
ledger = "state/ledger.sqlite3"
membership = "redis://127.0.0.1:6379/0"
delivery_ledger = false

[api]
port = 9000
token = { env = "BRIDGE_TEST_API_TOKEN" }

[notify]
threshold = 3
window = 20.0
"""


@pytest.fixture(scope="module")
def providers() -> ProviderRegistry:
    """The console provider, and the budget presets of the Slack, Discord and Teams plugins (only
    their presets: their providers stay uninstalled)."""
    plugins = [
        type(
            f"{module.__name__}:presets",
            (),
            {"register_budget_presets": staticmethod(module.register_budget_presets)},
        )
        for module in (bridge_slack.plugin, bridge_discord.plugin, bridge_teams.plugin)
    ]
    return create_plugin_manager(load_entry_points=False, extra_plugins=plugins).providers


def write(tmp_path: Path, text: str, name: str = "bridge.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def one_provider(name: str, settings_model: type[BaseModel]) -> ProviderRegistry:
    """A registry of one provider, ``bridge-<name>``, whose settings ``settings_model`` checks."""
    provider = ProviderType(
        name=name,
        capabilities=Capabilities(edit=True, max_length=100),
        budget=SLACK_BUDGET,
        settings_model=settings_model,
        factory=lambda settings, context: ChatProvider(),
    )
    return ProviderRegistry([RegisteredProvider(provider, f"bridge-{name}", "1.0")])


def problems_of(error: pytest.ExceptionInfo[ConfigError]) -> dict[str, str]:
    return {problem.key: problem.message for problem in error.value.problems}


def test_a_full_file_resolves(tmp_path: Path, providers: ProviderRegistry) -> None:
    path = write(tmp_path, FULL)
    config = load_config(path, providers=providers, environ={"BRIDGE_TEST_API_TOKEN": "s3cr3t"})
    assert config.path == path
    term = config.profiles["term"]
    assert isinstance(term.settings, ConsoleSettings)
    assert term.settings.inbound_author == "ana"
    assert term.send_budget == TEAMS_BUDGET
    assert term.provider_type is not None and term.provider_type.name == "console"
    assert config.profiles["term2"].send_budget == SendBudget(
        burst=2, per_second=600 / 3600, windows=(Window(600, 3600.0),), edit_spacing=3.0
    )
    ops = config.channels["ops"]
    assert (ops.channel_id, ops.thread, ops.agent) == ("C-OPS", "T1", "my_agents.ops:answer")
    assert ops.kinds == ["AgentFinished", "AgentGone"] and ops.workspaces == ["alpha"]
    # A channel's notify table overrides [notify] key by key; [notify] overrides the defaults.
    assert (ops.notify.hold, ops.notify.threshold, ops.notify.window) == (0.5, 3, 20.0)
    assert (config.channels["dev"].notify.hold, config.channels["dev"].notify.threshold) == (2.0, 3)
    assert config.profile_of("dev") is config.profiles["term2"]
    assert config.stores.ledger_path == tmp_path / "state" / "ledger.sqlite3"
    assert config.stores.ledger_url is None
    assert config.stores.membership_url == "redis://127.0.0.1:6379/0"
    assert config.stores.delivery_ledger is False
    assert (config.api.host, config.api.port) == ("127.0.0.1", 9000)
    assert config.api.token is not None
    assert config.api.token.get_secret_value() == "s3cr3t"


def test_defaults_need_no_file_content(tmp_path: Path, providers: ProviderRegistry) -> None:
    config = load_config(write(tmp_path, ""), providers=providers)
    assert config.profiles == {} and config.channels == {}
    assert config.stores.ledger_path == tmp_path / "bridge.sqlite3"
    assert config.stores.membership == "embedded" and config.stores.delivery_ledger is True
    assert (config.api.host, config.api.max_body_bytes) == ("127.0.0.1", 1_048_576)
    assert (config.notify.hold, config.notify.threshold, config.notify.window) == (2.0, 5, 10.0)
    assert BridgeConfig().notify == config.notify


def test_secrets_never_show_their_value(providers: ProviderRegistry) -> None:
    config = parse_config(
        {"api": {"token": {"env": "TOKEN_VAR"}}},
        providers=providers,
        environ={"TOKEN_VAR": "hunter2"},
    )
    token = config.api.token
    assert isinstance(token, Secret)
    for shown in (str(token), repr(token), repr(config), str(config.api), str(masked(config))):
        assert "hunter2" not in shown
    assert "TOKEN_VAR" in repr(token)
    assert masked(config.api)["token"] == "<secret from $TOKEN_VAR>"
    assert config.model_dump_json().count("hunter2") == 0


def test_a_missing_environment_variable_names_the_key(providers: ProviderRegistry) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config({"api": {"token": {"env": "NOPE_NOT_SET"}}}, providers=providers, environ={})
    assert problems_of(caught) == {
        "api.token": "environment variable NOPE_NOT_SET is not set (export it)"
    }


def test_an_unknown_profile_is_named_with_the_known_ones(
    tmp_path: Path, providers: ProviderRegistry
) -> None:
    text = '[profiles.a]\nprovider = "console"\n[channels.ops]\nprofile = "b"\nchannel_id = "C"\n'
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_config(path, providers=providers)
    assert problems_of(caught) == {"channels.ops.profile": "no profile named 'b' (profiles: a)"}
    assert str(caught.value).startswith(f"{path}: channels.ops.profile: ")


def test_two_entries_for_one_platform_channel_are_refused(
    tmp_path: Path, providers: ProviderRegistry
) -> None:
    # each would get a sender and a full budget, and the gateway routes replies to only one
    text = (
        '[profiles.a]\nprovider = "console"\n'
        '[channels.ops]\nprofile = "a"\nchannel_id = "C1"\n'
        '[channels.ops-copy]\nprofile = "a"\nchannel_id = "C1"\n'
        '[channels.dev]\nprofile = "a"\nchannel_id = "C2"\n'
    )
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, text), providers=providers)
    assert problems_of(caught) == {
        "channels.ops-copy.channel_id": "'C1' on profile 'a' is already channels.ops; "
        "one entry per channel id, as the channel's conversation log is named by it"
    }


def test_one_channel_id_on_two_profiles_is_refused(
    tmp_path: Path, providers: ProviderRegistry
) -> None:
    # one conversation log and one agent group for both: p1's turns were answered through p2
    text = (
        '[profiles.p1]\nprovider = "console"\n[profiles.p2]\nprovider = "console"\n'
        '[channels.a]\nprofile = "p1"\nchannel_id = "ops"\n'
        '[channels.b]\nprofile = "p2"\nchannel_id = "ops"\n'
    )
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, text), providers=providers)
    assert problems_of(caught) == {
        "channels.b.channel_id": "'ops' on profile 'p2' is already channels.a (on profile 'p1'); "
        "one entry per channel id, as the channel's conversation log is named by it"
    }


def test_an_uninstalled_provider_lists_the_installed_and_the_pip_line(
    providers: ProviderRegistry,
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config({"profiles": {"team": {"provider": "slack"}}}, providers=providers)
    message = problems_of(caught)["profiles.team.provider"]
    assert "installed providers: console" in message
    assert "chatbridge install bridge-slack" in message


def test_provider_settings_are_validated_by_the_providers_model(
    providers: ProviderRegistry,
) -> None:
    data = {"profiles": {"t": {"provider": "console", "settings": {"output": "printer", "x": 1}}}}
    with pytest.raises(ConfigError) as caught:
        parse_config(data, providers=providers)
    problems = problems_of(caught)
    assert "'stdout', 'stderr' or 'none'" in problems["profiles.t.settings.output"]
    assert "(got 'printer')" in problems["profiles.t.settings.output"]
    assert problems["profiles.t.settings.x"].startswith("unknown key; expected one of: ")
    assert "transcript" in problems["profiles.t.settings.x"]


def test_wrong_types_unknown_keys_and_missing_keys_are_all_reported(
    providers: ProviderRegistry,
) -> None:
    data = {
        "api": {"port": "eighty"},
        "channels": {"ops": {"profile": "p", "chanel_id": "C"}},
        "stores": {"ledger": "mysql://db"},
        "surprise": 1,
    }
    with pytest.raises(ConfigError) as caught:
        parse_config(data, providers=providers)
    problems = problems_of(caught)
    assert "valid integer" in problems["api.port"] and "'eighty'" in problems["api.port"]
    assert problems["channels.ops.channel_id"].startswith("is required (the channel's id")
    assert problems["channels.ops.chanel_id"].startswith("unknown key; expected one of: profile")
    assert "postgresql:// URL" in problems["stores.ledger"]
    assert problems["surprise"] == (
        "unknown key; expected one of: profiles, channels, stores, api, notify"
    )


def test_event_filters_and_agent_references_are_checked(providers: ProviderRegistry) -> None:
    data = {
        "profiles": {"p": {"provider": "console"}},
        "channels": {
            "ops": {"profile": "p", "channel_id": "C", "kinds": ["AgentFinishd"], "agent": "x"}
        },
    }
    with pytest.raises(ConfigError) as caught:
        parse_config(data, providers=providers)
    problems = problems_of(caught)
    assert "unknown event kind(s) 'AgentFinishd'" in problems["channels.ops.kinds"]
    assert "AgentFinished" in problems["channels.ops.kinds"]
    assert "package.module:function" in problems["channels.ops.agent"]


def test_budget_presets_and_numbers(providers: ProviderRegistry) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(
            {"profiles": {"p": {"provider": "console", "budget": "fast"}}}, providers=providers
        )
    assert "unknown budget preset 'fast'" in problems_of(caught)["profiles.p.budget"]
    with pytest.raises(ConfigError) as caught:
        parse_config(
            {"profiles": {"p": {"provider": "console", "budget": {"burst": 2}}}},
            providers=providers,
        )
    assert "needs burst and per_second or per_hour" in problems_of(caught)["profiles.p.budget"]
    # A tagged union: one problem per mistake, at the right key, whichever form was written.
    data = {
        "profiles": {
            "a": {"provider": "console", "budget": 3},
            "b": {"provider": "console", "budget": {"preset": "x"}},
        }
    }
    with pytest.raises(ConfigError) as caught:
        parse_config(data, providers=providers)
    assert problems_of(caught) == {
        "profiles.a.budget": "expected a budget preset name or a table (got int)",
        "profiles.b.budget.preset": (
            "unknown budget preset 'x'; expected one of discord, slack, teams, unlimited"
        ),
    }
    assert len(caught.value.problems) == 2
    settings = {"profiles": {"c": {"provider": "console", "settings": {"budget": "fastest"}}}}
    with pytest.raises(ConfigError) as caught:
        parse_config(settings, providers=providers)
    assert problems_of(caught) == {
        "profiles.c.settings.budget": (
            "unknown budget preset 'fastest'; expected one of discord, slack, teams, unlimited"
        )
    }
    presets = providers.budget_presets
    assert resolve_budget(None, SLACK_BUDGET, presets=presets) is SLACK_BUDGET
    assert resolve_budget("teams", SLACK_BUDGET, presets=presets) is TEAMS_BUDGET
    tuned = resolve_budget(
        BudgetNumbers(preset="slack", edit_spacing=5.0), UNLIMITED_BUDGET, presets=presets
    )
    assert tuned == SendBudget(
        burst=3, per_second=1.0, windows=SLACK_BUDGET.windows, edit_spacing=5.0
    )
    numbers = BudgetNumbers(burst=4, per_second=2.0, windows=[{"limit": 10, "seconds": 60}])  # type: ignore[list-item]
    assert numbers.resolve(presets) == SendBudget(
        burst=4, per_second=2.0, windows=(Window(10, 60.0),)
    )


def test_a_new_rate_replaces_the_presets_hourly_cap_and_keeps_its_short_windows(
    providers: ProviderRegistry,
) -> None:
    presets = providers.budget_presets
    slower = BudgetNumbers(preset="discord", per_hour=1800).resolve(presets)
    assert slower.windows == (Window(5, 5.0), Window(1800, 3600.0))
    assert slower.per_second == 0.5 and slower.burst == DISCORD_BUDGET.burst
    faster = BudgetNumbers(preset="slack", per_second=2.0).resolve(presets)
    assert faster.windows == () and faster.per_second == 2.0  # no hourly cap of 3,600 left
    teams = BudgetNumbers(preset="teams", per_second=0.25).resolve(presets)
    assert teams.windows == tuple(w for w in TEAMS_BUDGET.windows if w.seconds < 3600)
    given = BudgetNumbers(preset="discord", per_hour=1800, windows=[]).resolve(presets)
    assert given.windows == (Window(1800, 3600.0),)  # windows given replace the preset's


def test_a_budget_in_the_console_settings_applies_unless_the_profile_overrides(
    providers: ProviderRegistry,
) -> None:
    data = {
        "profiles": {
            "a": {"provider": "console", "settings": {"budget": "discord"}},
            "b": {"provider": "console", "settings": {"budget": "discord"}, "budget": "slack"},
            "c": {"provider": "console"},
        }
    }
    config = parse_config(data, providers=providers)
    budgets = {name: profile.send_budget for name, profile in config.profiles.items()}
    assert budgets["b"] == SLACK_BUDGET
    assert budgets["c"] == UNLIMITED_BUDGET
    assert budgets["a"] is not None and budgets["a"].burst == 5


class _RegionSettings(BaseModel):
    """A test provider's settings: one described key, one not."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    region: str
    """The ``eu`` or ``us`` region of the account: it picks the API host. More text."""
    account: str


def test_a_missing_key_says_what_it_is_for(providers: ProviderRegistry) -> None:
    """A required key's error quotes its description's first clause, as plain text."""
    registry = one_provider("region", _RegionSettings)
    with pytest.raises(ConfigError) as caught:
        parse_config({"profiles": {"r": {"provider": "region"}}}, providers=registry)
    assert problems_of(caught) == {
        "profiles.r.settings.region": "is required (the eu or us region of the account)",
        "profiles.r.settings.account": "is required",
    }
    data = {
        "channels": {"ops": {"profile": "p"}},
        "profiles": {"p": {"provider": "console", "budget": {"windows": [{"limit": 3}]}}},
    }
    with pytest.raises(ConfigError) as caught:
        parse_config(data, providers=providers)
    assert problems_of(caught) == {
        "channels.ops.channel_id": "is required (the channel's id on the platform)",
        # through a table of tables, a budget's preset-or-table union and a list
        "profiles.p.budget.windows.0.seconds": "is required (the window's length, in seconds)",
    }


def test_an_unknown_key_in_a_budget_table_lists_the_budget_keys(
    providers: ProviderRegistry,
) -> None:
    data = {"profiles": {"p": {"provider": "console", "budget": {"preset": "slack", "brust": 2}}}}
    with pytest.raises(ConfigError) as caught:
        parse_config(data, providers=providers)
    assert problems_of(caught) == {
        "profiles.p.budget.brust": (
            "unknown key; expected one of: preset, burst, per_second, per_hour, windows, "
            "edit_spacing"
        )
    }


def test_invalid_toml_and_a_missing_file_name_the_file(tmp_path: Path) -> None:
    bad = write(tmp_path, "[profiles\n")
    with pytest.raises(ConfigError, match=r"bridge\.toml: is not valid TOML"):
        load_config(bad)
    with pytest.raises(ConfigError, match=r"nowhere\.toml: no such file; create it, pass -c"):
        load_config(tmp_path / "nowhere.toml")


def test_the_config_path_comes_from_the_argument_then_the_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(CONFIG_ENV_VAR, raising=False)
    assert config_path() == Path("bridge.toml")
    monkeypatch.setenv(CONFIG_ENV_VAR, str(tmp_path / "from-env.toml"))
    assert config_path() == tmp_path / "from-env.toml"
    assert config_path("explicit.toml") == Path("explicit.toml")


def test_postgres_ledger_url_is_kept_as_a_url(providers: ProviderRegistry) -> None:
    config = parse_config(
        {"stores": {"ledger": "postgresql://u@db/bridge"}},
        path=Path("/etc/bridge.toml"),
        providers=providers,
    )
    assert config.stores.ledger_url == "postgresql://u@db/bridge"
    assert config.stores.ledger_path is None


class _VaultSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    api_key: Secret
    retries: int = 3


def test_values_of_secret_looking_keys_are_never_echoed_in_errors() -> None:
    registry = one_provider("vault", _VaultSettings)
    data = {
        "profiles": {"v": {"provider": "vault", "settings": {"api_key": 12345678, "retries": "x"}}}
    }
    with pytest.raises(ConfigError) as caught:
        parse_config(data, providers=registry)
    problems = problems_of(caught)
    assert "12345678" not in str(caught.value)
    assert "profiles.v.settings.api_key" in problems
    assert "(got 'x')" in problems["profiles.v.settings.retries"]
    config = parse_config(
        {"profiles": {"v": {"provider": "vault", "settings": {"api_key": {"env": "K"}}}}},
        providers=registry,
        environ={"K": "abc"},
    )
    settings = config.profiles["v"].settings
    assert isinstance(settings, _VaultSettings)
    assert settings.api_key.get_secret_value() == "abc"
    assert masked(settings) == {"api_key": "<secret from $K>", "retries": 3}


class _NoSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")


def test_a_thread_on_a_provider_without_threads_is_an_error() -> None:
    registry = one_provider("flat", _NoSettings)
    data = {
        "profiles": {"f": {"provider": "flat"}},
        "channels": {"ops": {"profile": "f", "channel_id": "C", "thread": "T"}},
    }
    with pytest.raises(ConfigError) as caught:
        parse_config(data, providers=registry)
    assert problems_of(caught) == {
        "channels.ops.thread": "provider 'flat' has no threads; remove the key"
    }
    del data["channels"]["ops"]["thread"]
    assert parse_config(data, providers=registry).channels["ops"].thread is None


class _TokenSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    token: Secret

    @field_validator("token")
    @classmethod
    def _not_empty(cls, value: Secret) -> Secret:
        if not value.get_secret_value():
            raise ValueError("token is empty")
        return value


def test_a_missing_variable_does_not_hide_other_problems_or_add_its_own() -> None:
    registry = one_provider("tokened", _TokenSettings)
    data = {
        "profiles": {"t": {"provider": "tokened", "settings": {"token": {"env": "UNSET_VAR"}}}},
        "channels": {"ops": {"profile": "typo", "channel_id": "C"}},
    }
    with pytest.raises(ConfigError) as caught:
        parse_config(data, providers=registry, environ={})
    assert problems_of(caught) == {
        "profiles.t.settings.token": "environment variable UNSET_VAR is not set (export it)",
        "channels.ops.profile": "no profile named 'typo' (profiles: t)",
    }


class _AcmePresets:
    """A third-party plugin offering one budget preset."""

    @staticmethod
    @hookimpl
    def register_budget_presets(register: Callable[[str, SendBudget], None]) -> None:
        register("acme", SendBudget(burst=2, per_second=0.5))


class _ClashingPresets:
    """A plugin naming a preset another plugin (and the core) already offers."""

    @staticmethod
    @hookimpl
    def register_budget_presets(register: Callable[[str, SendBudget], None]) -> None:
        register("fine", SendBudget(burst=1, per_second=1.0))
        register("acme", SendBudget(burst=9, per_second=9.0))


def test_a_plugins_budget_presets_resolve_and_an_unknown_one_lists_them() -> None:
    manager = create_plugin_manager(
        load_entry_points=False, extra_plugins=[_AcmePresets, _ClashingPresets]
    )
    registry = manager.providers
    assert dict(registry.budget_presets) == {
        "acme": SendBudget(burst=2, per_second=0.5),
        "unlimited": UNLIMITED_BUDGET,
    }
    # The second plugin is broken, and none of its presets count (not even "fine").
    assert [broken.error for broken in manager.broken] == [
        "budget preset 'acme' is already registered by bridge-core"
    ]
    data = {"profiles": {"p": {"provider": "console", "budget": {"preset": "acme", "burst": 4}}}}
    assert parse_config(data, providers=registry).profiles["p"].send_budget == SendBudget(
        burst=4, per_second=0.5
    )
    with pytest.raises(ConfigError) as caught:
        parse_config(
            {"profiles": {"p": {"provider": "console", "budget": "acmee"}}}, providers=registry
        )
    assert problems_of(caught) == {
        "profiles.p.budget": "unknown budget preset 'acmee'; expected one of acme, unlimited"
    }


def test_the_kinds_a_filter_may_name_are_the_event_classes_kinds(
    providers: ProviderRegistry,
) -> None:
    # "Unknown" is UnknownEvent's kind, no fleet's: a filter naming it is a typo to report.
    exported = [getattr(events, name) for name in events.__all__]
    fleet_events = [
        cls
        for cls in exported
        if isinstance(cls, type)
        and issubclass(cls, events.FleetEvent)
        and cls not in (events.FleetEvent, events.UnknownEvent)
    ]
    assert len(fleet_events) == 10
    assert known_event_kinds() == {cls.kind for cls in fleet_events}
    data = {
        "profiles": {"p": {"provider": "console"}},
        "channels": {"ops": {"profile": "p", "channel_id": "C", "kinds": ["Unknown"]}},
    }
    with pytest.raises(ConfigError) as caught:
        parse_config(data, providers=providers)
    assert "unknown event kind(s) 'Unknown'" in problems_of(caught)["channels.ops.kinds"]
