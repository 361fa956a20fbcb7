"""The configuration reference: pydantic models rendered as tables of keys, types and defaults."""

from __future__ import annotations

import importlib
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bridge_docgen.text import (
    cell,
    code_cell,
    default_text,
    display_type,
    first_paragraph,
    models_in,
    without_none,
)

__all__ = [
    "CONFIG_ROOT",
    "FIELD_NOTES",
    "config_error_example",
    "config_reference",
    "provider_settings",
    "render_model",
]

# The top-level model of bridge.toml.
CONFIG_ROOT = "bridge_core.config:BridgeConfig"


# Descriptions for config fields whose model does not carry ``Field(description=...)``.
# ``tests/docs`` fails when a key here no longer names a field, so a note cannot outlive its field;
# a description added to the model itself wins over the note.
FIELD_NOTES: dict[str, str] = {
    "BridgeConfig.profiles": "Bot profiles by name: a provider plus its credentials and settings. "
    "Several profiles may use one provider (two Slack apps).",
    "BridgeConfig.channels": "Channels by name: where notifications and replies go.",
    "BridgeConfig.stores": "Where state lives: the ledger and the conversation log.",
    "BridgeConfig.api": "The gateway's HTTP API.",
    "BridgeConfig.notify": "Notification timing for every channel; a channel's own `notify` "
    "table overrides it key by key.",
    "ProfileConfig.provider": "The provider's name as `chatbridge providers` lists it "
    "(`console`, `slack`, `discord`, `teams`, ...).",
    "ProfileConfig.settings": "The provider's own settings, validated by its settings model "
    '(see [Provider settings](#provider-settings)). Secrets as `{ env = "NAME" }`.',
    "ProfileConfig.budget": "Overrides the provider's send budget: a preset name (`slack`, "
    "`discord`, `teams`, `unlimited`) or a table.",
    "ChannelConfig.profile": "The profile (bot) that posts here.",
    "ChannelConfig.channel_id": "The platform's id of the channel (Slack `C0123456`, a Discord "
    "channel snowflake, a Teams conversation id).",
    "ChannelConfig.thread": "Post notifications into this thread instead of the channel.",
    "ChannelConfig.kinds": "Fleet event kinds to notify about; all notifying kinds when absent.",
    "ChannelConfig.workspaces": "Only events from these workspaces; all when absent.",
    "ChannelConfig.agent": "The agent that answers people here, as `package.module:function` "
    "(an async callable); no replies when absent.",
    "ChannelConfig.notify": "This channel's notification timing (overrides `[notify]`).",
    "NotifySettings.hold": "Seconds a new agent's first post waits, to tell a lone agent from "
    "a burst.",
    "NotifySettings.threshold": "Spawns within the hold (one channel and workspace) that share "
    "one summary message.",
    "NotifySettings.window": "Seconds after a summary's latest member within which a new spawn "
    "joins it.",
    "StoresConfig.ledger": "A SQLite file (relative to the config file's folder) or a "
    "`postgresql://` URL for several hosts.",
    "StoresConfig.membership": "`embedded` (one process) or a `redis://` URL for several hosts.",
    "StoresConfig.delivery_ledger": "`false` turns the delivery ledger off: replies in flight "
    "are lost on a crash (see the ledger concepts page).",
    "ApiConfig.host": "Address to listen on; beyond loopback a `token` is required.",
    "ApiConfig.port": "Port to listen on.",
    "ApiConfig.token": 'Bearer token for `/v1/*` and `/metrics`, as `{ env = "NAME" }`.',
    "ApiConfig.max_body_bytes": "Largest request body accepted.",
    "BudgetNumbers.preset": "A preset to start from; the other keys replace its numbers.",
    "BudgetNumbers.burst": "Sends allowed at once (the token bucket's size).",
    "BudgetNumbers.per_second": "Refill rate of the bucket.",
    "BudgetNumbers.per_hour": "Refill rate as sends an hour; also caps any hour at this many.",
    "BudgetNumbers.windows": "Extra sliding windows: at most `limit` sends in any `seconds`.",
    "BudgetNumbers.edit_spacing": "Minimum seconds between two edits of one message.",
    "WindowSpec.limit": "Sends allowed in the window.",
    "WindowSpec.seconds": "The window's length.",
}


def render_model(
    root: type[Any],
    *,
    heading_level: int = 3,
    key_prefix: str = "",
    notes: Mapping[str, str] | None = None,
) -> str:
    """Markdown tables for a pydantic model and every model reachable from its fields.

    Each model gets a heading (the TOML key paths where it appears) and a table: key, type,
    default, description. A field's description comes from ``Field(description=...)``, else from
    ``notes`` (keyed ``"Model.field"``, default ``FIELD_NOTES``); a model's from its docstring.
    Fields marked ``exclude`` are filled in after loading and are not keys of the file.
    """
    notes = FIELD_NOTES if notes is None else notes
    # Breadth first: every path where each model appears, in the order a reader meets them.
    paths: dict[type[Any], list[str]] = {root: [key_prefix]}
    queue = [root]
    while queue:
        model = queue.pop(0)
        path = paths[model][0]
        for name, field in model.model_fields.items():
            if field.exclude:
                continue
            key = field.alias or name
            origin = typing.get_origin(without_none(field.annotation))
            suffix = ".<name>" if origin is dict else ("[]" if origin is list else "")
            for child in models_in(field.annotation):
                child_path = f"{path + '.' if path else ''}{key}{suffix}"
                if child not in paths:
                    paths[child] = [child_path]
                    queue.append(child)
                elif child_path not in paths[child]:
                    paths[child].append(child_path)
    out: list[str] = []
    for model, where in paths.items():
        if where == [""]:
            title = "Top level"
        else:
            title = ", ".join(f"`[[{p[:-2]}]]`" if p.endswith("[]") else f"`[{p}]`" for p in where)
        out.append(f"{'#' * heading_level} {title}\n")
        # The root model's docstring speaks to programmers; the page introduces the file itself.
        summary = first_paragraph(model.__doc__) if where != [""] else ""
        if summary:
            out.append(f"{summary}\n")
        out.append("| key | type | default | description |")
        out.append("|---|---|---|---|")
        for name, field in model.model_fields.items():
            if field.exclude:
                continue
            key = field.alias or name
            description = field.description or notes.get(f"{model.__name__}.{name}", "")
            out.append(
                f"| `{key}` | {code_cell(display_type(field.annotation))} | "
                f"{cell(default_text(field))} | {cell(description)} |"
            )
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def _config_root() -> type[Any]:
    module_name, _, attribute = CONFIG_ROOT.partition(":")
    return getattr(importlib.import_module(module_name), attribute)  # type: ignore[no-any-return]


def config_reference() -> str:
    """Every key of ``bridge.toml``, from the config models."""
    return render_model(_config_root())


def provider_settings() -> str:
    """The ``settings`` table of each provider installed where the site is built."""
    from bridge_core.plugins import create_plugin_manager

    out: list[str] = []
    for entry in create_plugin_manager().providers.entries():
        provider = entry.type
        out.append(f"### `{provider.name}`\n")
        origin = f"`{entry.distribution}` {entry.version}"
        description = first_paragraph(provider.description).rstrip(".")
        description = f"{description[:1].upper()}{description[1:]}. " if description else ""
        out.append(f"{description}From {origin}.\n")
        body = render_model(provider.settings_model, heading_level=4, key_prefix="settings")
        # Drop the first heading: the provider's heading above stands for it.
        out.append(body.split("\n", 1)[1].lstrip("\n"))
    return "\n".join(out)


def config_error_example() -> str:
    """What ``ConfigError`` says about files with a misspelled key, provider and profile."""
    from bridge_core.config import ConfigError, parse_config

    broken_files = (
        {"channels": {"ops": {"profile": "ops", "channel_id": "C0123456", "colour": "red"}}},
        {
            "profiles": {"ops-slack": {"provider": "slak", "settings": {}}},
            "channels": {"ops": {"profile": "ops-slak", "channel_id": "C0123456"}},
        },
    )
    messages = []
    for data in broken_files:
        try:
            parse_config(data, path=Path("bridge.toml"), environ={})
        except ConfigError as error:
            messages.append(str(error))
        else:
            raise AssertionError(f"this example config was expected not to validate: {data}")
    return "```\n" + "\n".join(messages) + "\n```\n"
