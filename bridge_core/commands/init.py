"""``chatbridge init``: write a commented starter ``bridge.toml`` and a ``.env.example``.

As ``opsdroid config gen`` does, the file is generated from what is installed: one profile per
chosen provider, its settings read off the provider's own settings model (every key with its
description; required secrets as ``{ env = "..." }`` references, optional keys commented out with
their defaults), a channel per profile, the stores and the API. ``.env.example`` lists the
variables the file references. The result passes ``chatbridge check`` once they are exported.
"""

from __future__ import annotations

import enum
import json
import textwrap
from pathlib import Path
from typing import Any

import click
from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo

from bridge_core.commands import get_plugin_manager
from bridge_core.plugins import PluginError

__all__ = ["FILL_IN", "command", "starter_files"]

_WIDTH = 99
FILL_IN = '"FILL IN"'  # what a required setting with no example starts as: check names it
# A channel id each platform accepts the look of; the comment says to replace it.
_EXAMPLE_CHANNEL = {"slack": "C0123456789", "discord": "123456789012345678", "console": "console"}


def _comment(text: str) -> list[str]:
    return [f"# {line}" for line in textwrap.wrap(" ".join(text.split()), _WIDTH - 2)]


def _toml(value: Any) -> str | None:
    """``value`` as a TOML value, or None when it has no plain TOML form."""
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (str, Path)):
        return json.dumps(str(value), ensure_ascii=False)  # a TOML basic string
    if isinstance(value, list) and all(_toml(item) is not None for item in value):
        return "[" + ", ".join(_toml(item) or "" for item in value) + "]"
    return None


def _is_secret(field: FieldInfo) -> bool:
    annotation = field.annotation
    return annotation is SecretStr or "SecretStr" in str(annotation)


def _env_name(profile: str, key: str) -> str:
    return f"{profile}_{key}".upper().replace("-", "_")


def _settings_lines(
    model: type[BaseModel], *, provider: str, prefix: str, env: dict[str, str]
) -> list[str]:
    lines: list[str] = []
    for key, field in model.model_fields.items():
        description = field.description or ""
        lines += _comment(description)
        if _is_secret(field):
            name = _env_name(prefix, key)
            reference = f'{key} = {{ env = "{name}" }}'
            if field.is_required():
                env[name] = description
                lines.append(reference)
            else:
                lines.append(f"# {reference}")
        elif field.is_required():
            # The provider's own example when it declares one (Field(examples=[...])).
            example = _toml(field.examples[0]) if field.examples else None
            lines.append(f"{key} = {example or FILL_IN}  # required: replace it (see above)")
        else:
            default = field.get_default(call_default_factory=True)
            shown = _toml(default) if default is not None else None
            lines.append(
                f"# {key} = {shown}" if shown is not None else f"# {key} = …  (no default)"
            )
    if provider == "console" and lines:
        lines.append('transcript = "transcript.jsonl"  # what was posted, one JSON line each')
    return lines


def starter_files(providers: list[str]) -> tuple[str, str]:
    """The text of ``bridge.toml`` and ``.env.example`` for ``providers`` (installed names)."""
    registry = get_plugin_manager().providers
    presets = registry.budget_presets
    env: dict[str, str] = {}
    out = [
        "# bridge-core configuration, written by `chatbridge init`.",
        "# Check it with `chatbridge check` (and `chatbridge check --connect` to reach the stores",
        "# and the platforms); serve it with `chatbridge run`. Secrets are never written here:",
        '# each { env = "NAME" } reads an environment variable, listed in .env.example.',
        "",
    ]
    for provider in providers:
        entry = registry.get_entry(provider)  # UnknownProvider names what is installed
        kind = entry.type
        profile = f"{provider}-bot"
        out += [
            f"# ---- {provider}: {kind.description or entry.distribution} ({entry.distribution})",
            f"[profiles.{profile}]",
            f'provider = "{provider}"',
            # a preset the registry has (a provider's own, when it offers one), else a table
            f"# budget = {json.dumps(provider if provider in presets else 'unlimited')}"
            "   # default: the provider's own; or { burst = 3, per_hour = 3600 }",
            "",
            f"[profiles.{profile}.settings]",
            *_settings_lines(kind.settings_model, provider=provider, prefix=provider, env=env),
            "",
            f"[channels.{provider}]",
            f'profile = "{profile}"',
            # one id per channel, across profiles too: a placeholder names its provider
            f'channel_id = "{_EXAMPLE_CHANNEL.get(provider, f"FILL IN: a {provider} id")}"'
            "  # the platform's id of the channel to post in",
            '# agent = "my_agents.support:answer"   # who answers people here (module:function)',
            '# kinds = ["AgentSpawned", "StatusChanged", "AgentFinished", "AgentGone"]',
            "",
        ]
    out += [
        "[stores]",
        'ledger = "bridge.sqlite3"    # or "postgresql://user@host/db" for several hosts',
        'membership = "embedded"      # or "redis://host:6379/0" to run several gateways as one',
        "",
        "[api]",
        "port = 8787",
        '# host = "0.0.0.0"           # beyond this machine: needs the token below',
        '# token = { env = "BRIDGE_API_TOKEN" }',
        "",
    ]
    dotenv = [
        "# The environment variables bridge.toml reads. Copy to .env, fill in, and export them",
        "# (for example: set -a; . ./.env; set +a) before `chatbridge check` and `chatbridge run`.",
    ]
    for name, description in env.items():
        dotenv += ["", *_comment(description), f"{name}="]
    dotenv += ["", "# The API's bearer token, if [api] token is set:", "# BRIDGE_API_TOKEN="]
    return "\n".join(out), "\n".join(dotenv) + "\n"


@click.command("init")
@click.option(
    "-p",
    "--provider",
    "providers",
    multiple=True,
    help="A provider to configure (repeat for several; default: console); see `providers`.",
)
@click.option(
    "-d",
    "--dir",
    "folder",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("."),
    help="Where to write bridge.toml and .env.example (default: here).",
)
@click.option("--force", is_flag=True, help="Overwrite files that exist.")
def command(providers: tuple[str, ...], folder: Path, force: bool) -> None:
    """Write a commented starter bridge.toml and a .env.example for the chosen providers."""
    chosen = list(dict.fromkeys(providers or ("console",)))
    try:
        config, dotenv = starter_files(chosen)
    except PluginError as exc:
        raise click.UsageError(str(exc)) from exc
    targets = {folder / "bridge.toml": config, folder / ".env.example": dotenv}
    existing = [str(path) for path in targets if path.exists()]
    if existing and not force:
        raise click.ClickException(
            f"{', '.join(existing)} already exist{'s' if len(existing) == 1 else ''}; "
            "pass --force to overwrite, or --dir to write elsewhere"
        )
    folder.mkdir(parents=True, exist_ok=True)
    for path, text in targets.items():
        path.write_text(text, encoding="utf-8")
    click.echo(
        f"wrote {folder / 'bridge.toml'} ({', '.join(chosen)}) and {folder / '.env.example'}"
    )
    click.echo("next: fill in the FILL IN values and .env, then `chatbridge check --connect`")
