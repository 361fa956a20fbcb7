"""The configuration reference: pydantic models rendered as tables of keys, types and defaults."""

from __future__ import annotations

import importlib
import typing
from pathlib import Path
from typing import Any

from bridge_docgen.text import (
    cell,
    code_cell,
    default_text,
    display_type,
    doc_text,
    first_paragraph,
    models_in,
    without_none,
)

__all__ = [
    "CONFIG_ROOT",
    "config_error_example",
    "config_reference",
    "provider_settings",
    "render_model",
]

# The top-level model of bridge.toml.
CONFIG_ROOT = "bridge_core.config:BridgeConfig"


def render_model(root: type[Any], *, heading_level: int = 3, key_prefix: str = "") -> str:
    """Markdown tables for a pydantic model and every model reachable from its fields.

    Each model gets a heading (the TOML key paths where it appears) and a table: key, type,
    default, description. A field's description is the model's own (an attribute docstring with
    ``use_attribute_docstrings``, or ``Field(description=...)``), so the reference and the code
    cannot disagree; a model's summary is its docstring. Fields marked ``exclude`` are filled in
    after loading and are not keys of the file.
    """
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
            out.append(
                f"| `{key}` | {code_cell(display_type(field.annotation))} | "
                f"{cell(default_text(field))} | {cell(doc_text(field.description))} |"
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
    """What ``ConfigError`` says about files with a misspelled key, a missing key, a misspelled
    provider and profile."""
    from bridge_core.config import ConfigError, parse_config

    broken_files = (
        {
            "channels": {
                "ops": {"profile": "ops", "channel_id": "C0123456", "colour": "red"},
                "dev": {"profile": "ops"},
            }
        },
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
