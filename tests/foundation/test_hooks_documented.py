"""Every hookspec has its own section in docs/plugins/hooks.md (datasette's rule)."""

from __future__ import annotations

import re
from pathlib import Path

from bridge_core import hookspecs
from bridge_core.hookspecs import PROJECT_NAME

HOOKS_DOC = Path(__file__).resolve().parents[2] / "docs" / "plugins" / "hooks.md"


def hookspec_names() -> list[str]:
    marker = f"{PROJECT_NAME}_spec"
    return sorted(name for name in dir(hookspecs) if hasattr(getattr(hookspecs, name), marker))


def test_there_are_hookspecs_to_document() -> None:
    assert "register_providers" in hookspec_names()


def test_every_hookspec_has_a_heading_in_the_docs() -> None:
    headings = {
        match.group(1).strip("` ")
        for match in re.finditer(r"^#{2,4}\s+(.+?)\s*$", HOOKS_DOC.read_text(), re.MULTILINE)
    }
    missing = [name for name in hookspec_names() if not any(h.startswith(name) for h in headings)]
    assert missing == [], f"document these hooks in {HOOKS_DOC}: {missing}"
