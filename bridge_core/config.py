"""The gateway's configuration: one TOML file validated by pydantic models.

The file (``bridge.toml``, or ``-c PATH``, or ``$CHATBRIDGE_CONFIG``) has bot **profiles** (a
provider, its settings table validated by that provider's ``settings_model``, an optional budget
override), **channels** (a profile, the platform's channel id, event filters, an optional agent
handler and notification timing), the **stores**, the HTTP **api** and the **notify** defaults::

    [profiles.ops-slack]
    provider = "slack"
    settings = { token = { env = "SLACK_BOT_TOKEN" } }
    budget = "slack"                  # a preset a plugin offers, or { burst = 3, per_hour = 3600 }

    [channels.ops]
    profile = "ops-slack"
    channel_id = "C0123456"
    kinds = ["AgentFinished", "AgentGone"]
    notify = { hold = 1.0 }

    [stores]
    ledger = "bridge.sqlite3"         # or "postgresql://host/db"
    membership = "embedded"           # or "redis://host:6379/0"

A table of the exact form ``{ env = "NAME" }`` anywhere in the file is a secret read from that
environment variable at load time; it becomes a ``Secret``, whose ``str`` and ``repr`` never show
the value (``get_secret_value()`` does).

Exception hierarchy::

    ConfigError         the file is missing, not TOML, or does not validate; ``problems`` lists
                        each wrong key path (``channels.ops.profile``) and what was expected
"""

from __future__ import annotations

import os
import re
import tomllib
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
)

from bridge_core._config_budget import (
    BudgetNumbers,
    BudgetSpec,
    StrictModel,
    WindowSpec,
    budget_context,
    resolve_budget,
)
from bridge_core._config_problems import ConfigProblem, masked_url, problems_from
from bridge_core._config_values import input_problems, paths_beside
from bridge_core.errors import BridgeError
from bridge_core.events import EVENT_KINDS
from bridge_core.hookspecs import ProviderType
from bridge_core.provider import SendBudget
from bridge_core.text import text_problem

if typing.TYPE_CHECKING:
    from bridge_core.plugins import ProviderRegistry

__all__ = [
    "CONFIG_ENV_VAR",
    "DEFAULT_CONFIG_FILE",
    "ApiConfig",
    "BridgeConfig",
    "BudgetNumbers",
    "BudgetSpec",
    "ChannelConfig",
    "ConfigError",
    "ConfigProblem",
    "NotifySettings",
    "ProfileConfig",
    "Secret",
    "StoresConfig",
    "WindowSpec",
    "budget_context",
    "config_path",
    "known_event_kinds",
    "load_config",
    "masked",
    "masked_url",
    "parse_config",
    "resolve_budget",
]

CONFIG_ENV_VAR = "CHATBRIDGE_CONFIG"
DEFAULT_CONFIG_FILE = "bridge.toml"


# --------------------------------------------------------------------------- errors


class ConfigError(BridgeError):
    """The config file cannot be used; each problem names a key path and what was expected."""

    def __init__(self, path: Path | str | None, problems: Sequence[ConfigProblem]) -> None:
        self.path = Path(path) if path is not None else None
        self.problems = tuple(problems)
        where = str(self.path) if self.path is not None else "<config>"
        lines = [f"{where}: {problem}" for problem in self.problems]
        super().__init__("\n".join(lines))


# --------------------------------------------------------------------------- secrets


class Secret(SecretStr):
    """A secret value; ``str``/``repr`` show only where it came from, never the value."""

    def __init__(self, secret_value: str, *, source: str | None = None) -> None:
        super().__init__(secret_value)
        self.source = source

    def __repr__(self) -> str:
        if self.source is not None:
            return f"Secret(env={self.source!r})"
        return "Secret('**********')"

    def describe(self) -> str:
        return f"<secret from ${self.source}>" if self.source else "<secret>"


def _resolve_env_refs(
    data: Any, environ: Mapping[str, str], key: str, problems: list[ConfigProblem]
) -> Any:
    """Replace every ``{ env = "NAME" }`` table with a ``Secret`` read from the environment."""
    if isinstance(data, dict):
        if set(data) == {"env"} and isinstance(data["env"], str):
            name = data["env"]
            value = environ.get(name)
            if value is None:
                problems.append(
                    ConfigProblem(key, f"environment variable {name} is not set (export it)")
                )
                return Secret("", source=name)
            # Bytes that are not UTF-8 reach os.environ as lone surrogates (ADR 0070).
            problem = text_problem(value)
            if problem is not None:
                problems.append(ConfigProblem(key, f"environment variable {name} {problem}"))
                return Secret("", source=name)
            return Secret(value, source=name)
        return {
            k: _resolve_env_refs(v, environ, f"{key}.{k}" if key else str(k), problems)
            for k, v in data.items()
        }
    if isinstance(data, list):
        return [
            _resolve_env_refs(item, environ, f"{key}.{i}", problems) for i, item in enumerate(data)
        ]
    return data


# --------------------------------------------------------------------------- sections


def known_event_kinds() -> frozenset[str]:
    """The fleet event kinds a channel's ``kinds`` filter may name."""
    # Not FleetEvent.__subclasses__(): a slotted dataclass leaves its first, unslotted class
    # behind there (UnknownEvent's among them, whose kind is "Unknown"), so it listed "Unknown".
    return EVENT_KINDS


class NotifySettings(StrictModel):
    """Notification timing (seed ADR 0007): how long a new agent's message waits, and when a
    burst of spawns shares one summary message instead of a message each."""

    hold: float = Field(default=2.0, ge=0)
    """Seconds a new agent's first message waits before it is posted. Spawns that arrive in the
    meantime tell a burst from a lone agent; every new agent's first post is this much late. Raise
    it if your fleet spawns in slow waves that should still be summarised."""
    threshold: int = Field(default=5, ge=1)
    """Spawns of one workspace within a hold that share one summary message. When the first of them
    has waited out the hold and this many of its workspace are waiting, they all join a summary
    edited in place with counts of done, running and failed (a failure still gets its own post).
    Lower it to summarise smaller bursts."""
    window: float = Field(default=10.0, gt=0)
    """Seconds after a summary's latest member during which a new spawn of its workspace joins it at
    once, instead of waiting out a hold of its own. Keeps a burst that arrives in waves in one
    message; lower it if unrelated spawns get lumped together."""


class ProfileConfig(StrictModel):
    """A bot: a provider with its settings. After loading, ``settings`` holds the validated
    settings model, and ``provider_type`` and ``send_budget`` are filled in."""

    provider: str = Field(min_length=1)
    """The provider's name, as ``chatbridge providers`` lists it: ``slack``, ``discord``, ``teams``,
    ``console`` or a plugin's. Several profiles may name one provider (two Slack apps)."""
    settings: Any = Field(default_factory=dict)
    """The provider's own settings table, validated by its settings model (see [Provider
    settings](#provider-settings)). Write secrets as ``{ env = "NAME" }``."""
    budget: BudgetSpec | None = None
    """The send limits of each channel this profile posts to, replacing the provider's default: a
    preset name (``unlimited``, or one a plugin offers: ``slack``, ``discord``, ``teams``,
    ``matrix``) or a table. Every channel is paced on its own budget, shared by all gateways when
    they share Redis. Tighten it for a workspace with stricter limits; loosen it for a self-hosted
    platform."""
    provider_type: ProviderType[Any] | None = Field(default=None, exclude=True)
    """Filled in by the loader: the provider type ``provider`` names. Not a key of the file."""
    send_budget: SendBudget | None = Field(default=None, exclude=True)
    """Filled in by the loader: the budget this profile's channels are paced by (``budget``, else
    the settings' own, else the provider's). Not a key of the file."""


_AGENT_REF = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


class ChannelConfig(StrictModel):
    """A chat channel the bridge writes to (and reads from)."""

    profile: str = Field(min_length=1)
    """The profile (bot) that posts here and hears what people write here."""
    channel_id: str = Field(min_length=1)
    """The channel's id on the platform: Slack's ``C0123456``, a Discord channel's id, a Teams
    conversation id. People's messages reach this channel by its profile and this id, so two
    channels of one profile cannot name the same id."""
    thread: str | None = None
    """A thread to post into instead of the channel's top level: the root message's ``ts`` on Slack,
    a thread's id on Discord, the root message's id on Teams. Notifications go there, and so do
    replies and API messages that have no thread of their own. Only for providers with threads."""
    kinds: list[str] | None = None
    """The fleet event kinds this channel is notified of. Not set: ``AgentSpawned``,
    ``StatusChanged``, ``AgentFinished`` and ``AgentGone``; leave out ``StatusChanged`` for a
    quieter channel whose messages change only when an agent ends. Other kinds are accepted but post
    nothing."""
    workspaces: list[str] | None = None
    """Only events from these fleet workspaces notify here. Not set: every workspace. Use it to give
    each team's workspace a channel of its own."""
    agent: str | None = None
    """The agent that answers people here, as ``package.module:function``: an async callable
    ``agent(turn, history)`` that returns the reply's text. Without one (and without ``chatbridge
    run --agent``), what people write here is ignored. Every gateway that serves this channel with
    an agent joins its agent group, and one of them owns each conversation."""
    agent_group: str | None = Field(default=None, min_length=1, max_length=200)
    """The agent group that agent processes connected to ``/v1/agents`` join to answer people here
    (their ``hello`` names it and this channel). Each connection is one member of the channel's
    group beside the gateways' in-process ``agent``, if there is one, and one member owns each
    conversation. Not set: no connected agent can serve this channel."""
    notify: NotifySettings = Field(default_factory=NotifySettings)
    """This channel's notification timing; each key given overrides the one in ``[notify]``."""

    @field_validator("kinds")
    @classmethod
    def _known_kinds(cls, value: list[str] | None) -> list[str] | None:
        if value is not None:
            known = known_event_kinds()
            unknown = [kind for kind in value if kind not in known]
            if unknown:
                raise ValueError(
                    f"unknown event kind(s) {', '.join(map(repr, unknown))}; expected some of "
                    + ", ".join(sorted(known))
                )
        return value

    @field_validator("agent")
    @classmethod
    def _agent_ref(cls, value: str | None) -> str | None:
        if value is not None and not _AGENT_REF.match(value):
            raise ValueError(f"expected 'package.module:function', got {value!r}")
        return value


_LEDGER_SCHEMES = ("postgresql://", "postgres://")
_MEMBERSHIP_SCHEMES = ("redis://", "rediss://", "unix://")


class StoresConfig(StrictModel):
    """Where state lives. Relative paths are relative to the config file's folder."""

    ledger: str = "bridge.sqlite3"
    """Where the delivery ledger lives: a SQLite file, or a ``postgresql://`` URL for gateways on
    several hosts; a URL with a password may be given as ``{ env = "NAME" }``, and its password is
    shown as ``***`` wherever the URL is. A relative path is relative to the config file's folder.
    With ``membership = "embedded"`` the SQLite file also holds the conversation logs and the
    inbound dedup records (beside a PostgreSQL ledger those go to ``bridge-log.sqlite3`` in the
    config file's folder)."""
    membership: str = "embedded"
    """Where the agent groups' conversation logs and membership live: ``embedded`` for one gateway
    process, or a ``redis://`` (``rediss://``, ``unix://``) URL to run several gateways as one (as
    ``{ env = "NAME" }`` when it holds a password, shown as ``***``). With Redis, gateways also
    share fleet events and each channel's send budget, and one live gateway is chosen to notify
    each channel."""
    delivery_ledger: bool = True
    """Record each reply durably before it is sent, so a crash or an outage delays a reply but never
    loses it. ``false`` sends each reply once, unrecorded: a failed send is not retried, a crash
    loses the replies in flight, nothing is labelled a possible duplicate, and providers' stored
    state (Teams conversation references) lasts only as long as the process. Turn it off only where
    a duplicate is worse than a lost reply (ADR 0024)."""

    @field_validator("ledger", "membership", mode="before")
    @classmethod
    def _from_env(cls, value: Any) -> Any:
        # A URL with a password is a secret: it may come from { env = "..." } like a token.
        return value.get_secret_value() if isinstance(value, SecretStr) else value

    @field_validator("ledger")
    @classmethod
    def _ledger(cls, value: str) -> str:
        if "://" in value and not value.startswith(_LEDGER_SCHEMES):
            raise ValueError(
                f"expected a file path or a postgresql:// URL, got {masked_url(value)!r}"
            )
        if not value:
            raise ValueError("expected a file path or a postgresql:// URL, got an empty string")
        return value

    @field_validator("membership")
    @classmethod
    def _membership(cls, value: str) -> str:
        if value != "embedded" and not value.startswith(_MEMBERSHIP_SCHEMES):
            raise ValueError(f'expected "embedded" or a redis:// URL, got {masked_url(value)!r}')
        return value

    @property
    def ledger_url(self) -> str | None:
        """The PostgreSQL URL, or None when the ledger is a SQLite file."""
        return self.ledger if self.ledger.startswith(_LEDGER_SCHEMES) else None

    @property
    def ledger_path(self) -> Path | None:
        """The SQLite file, or None when the ledger is in PostgreSQL."""
        return None if self.ledger_url is not None else Path(self.ledger)

    @property
    def membership_url(self) -> str | None:
        return None if self.membership == "embedded" else self.membership


class ApiConfig(StrictModel):
    """The gateway's HTTP API (events in, health, metrics, provider routes)."""

    host: str = "127.0.0.1"
    """The address the HTTP API listens on. The default serves this machine only; any other
    (``0.0.0.0`` behind a load balancer, or for Slack Events and Teams to reach) needs a ``token``,
    or the gateway refuses to start. ``chatbridge run --host`` overrides it."""
    port: int = Field(default=8787, ge=0, le=65535)
    """The port the HTTP API listens on; 0 takes any free port. ``chatbridge run --port`` overrides
    it."""
    token: Secret | None = None
    """The bearer token that ``/v1/*`` and ``/metrics`` require, as ``Authorization: Bearer …``: 401
    without it, 403 when wrong. ``/healthz`` stays open for load balancers, and the providers'
    inbound routes check the platforms' own signatures instead. Not set: no authentication, which
    the gateway allows only on loopback."""
    agent_tokens: dict[str, Secret] = Field(default_factory=dict)
    """Bearer tokens for agent processes connecting to ``/v1/agents``, by agent name, each
    usually ``{ env = "NAME" }``; the API ``token`` is accepted there too. Give each agent its own
    to revoke one without the others."""
    max_body_bytes: int = Field(default=1_048_576, ge=1)
    """The largest request body accepted, in bytes: event batches, messages and the providers'
    inbound requests alike; a larger one is answered 413. Raise it to post bigger batches of events
    in one request."""


class BridgeConfig(StrictModel):
    """The whole file. ``path`` is where it was read from (None when built in code)."""

    path: Path | None = Field(default=None, exclude=True)
    """The file this configuration was read from (None when built in code). Not a key of the
    file."""
    profiles: dict[str, ProfileConfig] = Field(default_factory=dict)
    """Bot profiles by name: a provider plus its credentials and settings. Each channel names the
    profile that posts to it."""
    channels: dict[str, ChannelConfig] = Field(default_factory=dict)
    """Channels by name: where notifications and replies go. The name is yours (metrics and ``POST
    /v1/messages`` use it); ``channel_id`` is the platform's."""
    stores: StoresConfig = Field(default_factory=StoresConfig)
    """Where state lives: the delivery ledger and the conversation logs."""
    api: ApiConfig = Field(default_factory=ApiConfig)
    """The gateway's HTTP API: fleet events and messages in, health and metrics out, and the
    providers' inbound routes."""
    notify: NotifySettings = Field(default_factory=NotifySettings)
    """Notification timing for every channel; a channel's own ``notify`` table overrides it key by
    key."""

    def profile_of(self, channel: str) -> ProfileConfig:
        """The profile a channel posts through."""
        return self.profiles[self.channels[channel].profile]


# --------------------------------------------------------------------------- loading


def config_path(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The config file to read: ``explicit``, else ``$CHATBRIDGE_CONFIG``, else ``bridge.toml``."""
    if explicit is not None:
        return Path(explicit)
    return Path(os.environ.get(CONFIG_ENV_VAR) or DEFAULT_CONFIG_FILE)


def load_config(
    path: str | os.PathLike[str] | None = None,
    *,
    providers: ProviderRegistry | None = None,
    environ: Mapping[str, str] | None = None,
) -> BridgeConfig:
    """Read, resolve and validate a config file; raises ``ConfigError`` naming every problem.

    ``providers`` validates each profile's provider and settings; by default the installed plugins
    are loaded to build it.
    """
    file = config_path(path)
    try:
        raw = file.read_bytes()
    except FileNotFoundError:
        raise ConfigError(
            file,
            [
                ConfigProblem(
                    "",
                    f"no such file; create it, pass -c PATH or set {CONFIG_ENV_VAR} "
                    "(see README.md for an example)",
                )
            ],
        ) from None
    except OSError as exc:
        raise ConfigError(file, [ConfigProblem("", f"cannot be read: {exc}")]) from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(file, [ConfigProblem("", f"is not valid TOML: {exc}")]) from None
    except RecursionError:  # tomllib recurses per level: a few hundred nested arrays end it
        raise ConfigError(
            file, [ConfigProblem("", "is nested too deeply to read; a config needs a handful")]
        ) from None
    return parse_config(data, path=file, providers=providers, environ=environ)


def parse_config(
    data: Mapping[str, Any],
    *,
    path: Path | None = None,
    providers: ProviderRegistry | None = None,
    environ: Mapping[str, str] | None = None,
) -> BridgeConfig:
    """Validate already-parsed TOML data (what ``load_config`` does after reading the file)."""
    problems = input_problems(data)
    if problems:
        raise ConfigError(path, problems)
    resolved = _resolve_env_refs(
        dict(data), os.environ if environ is None else environ, "", problems
    )
    resolved = _apply_notify_defaults(resolved)
    if providers is None:
        from bridge_core.plugins import create_plugin_manager

        providers = create_plugin_manager().providers
    try:
        # The plugins name the budget presets: an unknown ``budget = "..."`` is refused here.
        config = BridgeConfig.model_validate(
            resolved, context=budget_context(providers.budget_presets)
        )
    except ValidationError as exc:
        problems.extend(problems_from(exc, prefix="", model=BridgeConfig))
        raise ConfigError(path, problems) from None
    # A missing environment variable leaves the structure valid: go on to find the other problems.
    missing_env = {problem.key for problem in problems}
    config = config.model_copy(update={"path": path})
    if path is not None:
        ledger = config.stores.ledger_path
        if ledger is not None and not ledger.is_absolute():
            stores = config.stores.model_copy(update={"ledger": str(path.parent / ledger)})
            config = config.model_copy(update={"stores": stores})
    _resolve_profiles(config, providers, problems)
    # One entry per channel id, across profiles too: a channel's conversation log is named by
    # its id, and two profiles' channels would be one agent group answering through either.
    first_of: dict[str, str] = {}
    for name, channel in config.channels.items():
        first = first_of.setdefault(channel.channel_id, name)
        if first != name:
            other = config.channels[first].profile
            where = "" if other == channel.profile else f" (on profile {other!r})"
            problems.append(
                ConfigProblem(
                    f"channels.{name}.channel_id",
                    f"{channel.channel_id!r} on profile {channel.profile!r} is already "
                    f"channels.{first}{where}; one entry per channel id, as the channel's "
                    "conversation log is named by it",
                )
            )
        if channel.profile not in config.profiles:
            known = ", ".join(sorted(config.profiles)) or "none defined"
            problems.append(
                ConfigProblem(
                    f"channels.{name}.profile",
                    f"no profile named {channel.profile!r} (profiles: {known})",
                )
            )
            continue
        provider_type = config.profiles[channel.profile].provider_type
        if channel.thread is not None and provider_type is not None:
            if not provider_type.capabilities.threads:
                problems.append(
                    ConfigProblem(
                        f"channels.{name}.thread",
                        f"provider {provider_type.name!r} has no threads; remove the key",
                    )
                )
    if problems:
        # The empty stand-in for a missing variable must not add a second problem at its key.
        raise ConfigError(
            path,
            [
                problem
                for index, problem in enumerate(problems)
                if index < len(missing_env) or problem.key not in missing_env
            ],
        )
    return config


def _apply_notify_defaults(data: dict[str, Any]) -> dict[str, Any]:
    """A channel's ``notify`` table overrides the top-level ``[notify]`` key by key."""
    defaults = data.get("notify")
    channels = data.get("channels")
    if not isinstance(defaults, dict) or not isinstance(channels, dict):
        return data
    merged = {}
    for name, channel in channels.items():
        if isinstance(channel, dict):
            own = channel.get("notify", {})
            if isinstance(own, dict):
                channel = {**channel, "notify": {**defaults, **own}}
        merged[name] = channel
    return {**data, "channels": merged}


def _resolve_profiles(
    config: BridgeConfig, providers: ProviderRegistry, problems: list[ConfigProblem]
) -> None:
    presets = providers.budget_presets
    for name, profile in list(config.profiles.items()):
        if profile.provider not in providers:
            problems.append(
                ConfigProblem(
                    f"profiles.{name}.provider", providers.missing_message(profile.provider)
                )
            )
            continue
        provider_type = providers.get(profile.provider)
        try:
            settings = provider_type.settings_model.model_validate(
                profile.settings, context=budget_context(presets)
            )
        except ValidationError as exc:
            problems.extend(
                problems_from(
                    exc, prefix=f"profiles.{name}.settings", model=provider_type.settings_model
                )
            )
            continue
        if config.path is not None:
            settings = paths_beside(settings, config.path.parent)
        own_budget = getattr(settings, "budget", None)
        default = provider_type.budget
        if isinstance(own_budget, (str, BudgetNumbers)):
            default = resolve_budget(own_budget, default, presets=presets)
        config.profiles[name] = profile.model_copy(
            update={
                "settings": settings,
                "provider_type": provider_type,
                "send_budget": resolve_budget(profile.budget, default, presets=presets),
            }
        )


def masked(value: Any) -> Any:
    """A JSON-ready copy of a config value with every secret replaced by where it comes from,
    and the password of every URL in it shown as ``***``."""
    if isinstance(value, Secret):
        return value.describe()
    if isinstance(value, SecretStr):
        return "<secret>"
    if isinstance(value, BaseModel):
        return {
            name: masked(getattr(value, name))
            for name, field in type(value).model_fields.items()
            if not field.exclude
        }
    if isinstance(value, SendBudget):
        return value.to_json()
    if isinstance(value, dict):
        return {str(k): masked(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [masked(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, str):
        return masked_url(value)
    if hasattr(value, "value") and not isinstance(value, (str, int, float, bool)):
        return value.value  # enums
    return value
