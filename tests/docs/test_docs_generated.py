"""The generated blocks committed in the docs are what the code generates now, so a page read on
GitHub (without the site's build) is complete and current."""

from __future__ import annotations

import difflib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _load_hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bridge_docs_hooks_committed", DOCS / "hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(DOCS))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(DOCS))
    return module


hooks = _load_hooks()


def test_every_committed_generated_block_is_current() -> None:
    pages = list(hooks.pages_with_markers(DOCS))
    assert len(pages) >= 10, pages
    stale: list[str] = []
    for path in pages:
        committed = path.read_text(encoding="utf-8")
        current = hooks.fill_markers(committed, where=path.name)
        if current != committed:
            diff = difflib.unified_diff(
                committed.splitlines(), current.splitlines(), str(path), "generated", lineterm=""
            )
            stale.append("\n".join(list(diff)[:40]))
    assert not stale, (
        "generated blocks in the docs are stale; run `python docs/hooks.py --write` and commit:\n"
        + "\n\n".join(stale)
    )


def test_a_committed_block_is_replaced_in_the_build_and_refilled_in_place() -> None:
    page = (
        "a\n\n<!-- generated: budget-presets -->\n\nold table\n\n"
        "<!-- /generated: budget-presets -->\n\nb\n"
    )
    built = hooks.expand_markers(page)
    assert "old table" not in built and "generated:" not in built and "| `unlimited` |" in built
    filled = hooks.fill_markers(page)
    assert "old table" not in filled and filled.count("<!-- /generated: budget-presets -->") == 1
    assert hooks.fill_markers(filled) == filled
    # A page without the end marker yet (a new block) gets it.
    fresh = hooks.fill_markers("<!-- generated: budget-presets -->\n")
    assert fresh.rstrip().endswith("<!-- /generated: budget-presets -->")
