"""mkdocs hooks: the parts of the site that are generated from the code, so they cannot drift.

A page asks for a generated block with a marker on a line of its own::

    <!-- generated: error-table -->
    <!-- generated: budget-presets -->
    <!-- generated: config-reference -->
    <!-- generated: config-error-example -->
    <!-- generated: provider-settings -->
    <!-- generated: platform-errors -->
    <!-- generated: adr-index -->
    <!-- generated: readme-commands -->
    <!-- generated: cli-reference -->
    <!-- generated: cli-ledger -->
    <!-- generated: hookspecs -->
    <!-- generated: metrics -->
    <!-- generated: kit-modules -->
    <!-- generated: log-records -->
    <!-- generated: event-kinds -->
    <!-- generated: notify-examples -->
    <!-- generated: ledger-markers -->
    <!-- generated: ledger-schedule -->
    <!-- generated: streaming-timeline -->
    <!-- generated: bench-table -->
    <!-- generated: bench-scale -->
    <!-- generated: bench-runs -->

``on_page_markdown`` replaces each marker with markdown rendered from the live objects
(``bridge_core.provider.ERROR_TABLE``, the pydantic config models, the files in ``docs/adr/``,
the hookspecs). An unknown marker, or a generator that fails, is an error: the strict build
fails instead of publishing a page with a hole in it.

The committed pages hold the generated block too, between the marker and an end marker
``<!-- /generated: NAME -->``, so a page read on GitHub is complete; the build replaces the
block with a fresh rendering, and ``tests/docs/test_docs_generated.py`` fails when a committed
block differs from it. ``python docs/hooks.py --write`` rewrites every committed block.

Links from a page to a file outside ``docs/`` (an ADR pointing at ``../../bridge_core/x.py``)
cannot resolve in the built site; they are rewritten to the path in code font, so the strict
build does not fail on them and the reader still sees where to look.

Run ``python docs/hooks.py NAME`` to print one generated block.
"""

from __future__ import annotations

import posixpath
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

# mkdocs puts this file's folder on sys.path while it loads the hooks; so do the tests.
from bridge_docgen import benchmarks, code_tables, config, project, streaming

__all__ = [
    "DOCS_DIR",
    "GENERATORS",
    "MARKER",
    "expand_markers",
    "fill_markers",
    "pages_with_markers",
    "on_page_content",
    "on_page_markdown",
    "scalable_diagrams",
]

MARKER = re.compile(r"^<!--[ \t]*generated:[ \t]*([a-z][a-z0-9-]*)[ \t]*-->[ \t]*$", re.MULTILINE)
# A marker, then (in a committed page) the block generated last time and its end marker.
_BLOCK = re.compile(
    r"^<!--[ \t]*generated:[ \t]*(?P<name>[a-z][a-z0-9-]*)[ \t]*-->[ \t]*$"
    r"(?:\n(?P<body>(?:(?!<!--[ \t]*/?generated:).*\n)*?)"
    r"<!--[ \t]*/generated:[ \t]*(?P=name)[ \t]*-->[ \t]*$)?",
    re.MULTILINE,
)
DOCS_DIR = Path(__file__).resolve().parent

GENERATORS: dict[str, Callable[[], str]] = {
    "adr-index": project.adr_index,
    "bench-runs": benchmarks.runs_table,
    "bench-scale": benchmarks.scale_table,
    "bench-table": benchmarks.results_table,
    "budget-presets": code_tables.budget_presets,
    "cli-ledger": project.cli_ledger,
    "cli-reference": project.cli_reference,
    "config-error-example": config.config_error_example,
    "config-reference": config.config_reference,
    "error-table": code_tables.error_table,
    "event-kinds": code_tables.event_kinds,
    "hookspecs": code_tables.hookspec_summary,
    "kit-modules": code_tables.kit_modules,
    "ledger-markers": code_tables.ledger_markers,
    "ledger-schedule": code_tables.ledger_schedule,
    "log-records": code_tables.log_records,
    "metrics": code_tables.metrics_table,
    "notify-examples": code_tables.notify_examples,
    "platform-errors": code_tables.platform_errors,
    "provider-settings": config.provider_settings,
    "readme-commands": project.readme_commands,
    "streaming-timeline": streaming.streaming_timeline,
}


_OUTSIDE_LINK = re.compile(r"(?<!!)\[([^\]]+)\]\(((?:\.\./)+[^)\s]+)\)")


def _rewrite_outside_links(markdown: str, page_path: str) -> str:
    """Links that leave ``docs/`` become the repository path in code font."""
    page_dir = posixpath.dirname(page_path)

    def replace(match: re.Match[str]) -> str:
        target = posixpath.normpath(posixpath.join("docs", page_dir, match.group(2)))
        if target.startswith("docs/"):
            return match.group(0)
        return f"{match.group(1)} (`{target}`)"

    return _OUTSIDE_LINK.sub(replace, markdown)


def _render(name: str, where: str, overrides: Mapping[str, Callable[[], str]] | None) -> str:
    generator = (overrides or {}).get(name) or GENERATORS.get(name)
    if generator is None:
        raise KeyError(f"{where}: unknown generated block {name!r}; known: {sorted(GENERATORS)}")
    try:
        return generator().rstrip("\n")
    except Exception as error:
        raise RuntimeError(f"{where}: generating {name!r} failed: {error!r}") from error


def expand_markers(
    markdown: str,
    *,
    where: str = "page",
    overrides: Mapping[str, Callable[[], str]] | None = None,
) -> str:
    """Replace each ``<!-- generated: NAME -->`` line (with the committed block after it, up to
    its end marker, if any) with what ``GENERATORS[NAME]`` renders (or ``overrides[NAME]``,
    which the build uses to hand generators what it collected)."""
    return _BLOCK.sub(lambda match: _render(match["name"], where, overrides), markdown)


def fill_markers(markdown: str, *, where: str = "page") -> str:
    """The page as it is committed: each marker followed by its generated block and an end
    marker, blank lines around the block (so it reads as markdown on GitHub too)."""

    def fill(match: re.Match[str]) -> str:
        name = match["name"]
        block = _render(name, where, None)
        return f"<!-- generated: {name} -->\n\n{block}\n\n<!-- /generated: {name} -->"

    return _BLOCK.sub(fill, markdown)


def pages_with_markers(root: Path = DOCS_DIR) -> Iterator[Path]:
    """Every markdown page below ``root`` with a generated block."""
    for path in sorted(root.rglob("*.md")):
        if MARKER.search(path.read_text(encoding="utf-8")):
            yield path


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    src = page.file.src_uri
    collected = [f.src_uri[len("adr/") :] for f in files if f.src_uri.startswith("adr/")]
    overrides = {"adr-index": lambda: project.adr_index(collected)}
    return _rewrite_outside_links(expand_markers(markdown, where=src, overrides=overrides), src)


if __name__ == "__main__":  # pragma: no cover - a convenience for writers
    if sys.argv[1:] == ["--write"]:
        for path in pages_with_markers():
            text = path.read_text(encoding="utf-8")
            filled = fill_markers(text, where=str(path.relative_to(DOCS_DIR)))
            if filled != text:
                path.write_text(filled, encoding="utf-8")
                print(f"rewrote {path.relative_to(DOCS_DIR.parent)}")
        sys.exit(0)
    if len(sys.argv) != 2 or sys.argv[1] not in GENERATORS:
        sys.exit(f"usage: python docs/hooks.py --write | {{{'|'.join(sorted(GENERATORS))}}}")
    sys.stdout.write(GENERATORS[sys.argv[1]]())


# svgbob's diagrams (```bob blocks, markdown_svgbob) come with a fixed width and height and no
# viewBox, so a diagram wider than the content column would be cut off at its edge. With a
# viewBox it scales down to the column (docs/css/extra.css: svg.diagram).
_SVGBOB = re.compile(r'<svg xmlns="http://www.w3.org/2000/svg" width="(\d+)" height="(\d+)">')


def scalable_diagrams(html: str) -> str:
    """Give every svgbob diagram in ``html`` a viewBox and the ``diagram`` class."""
    return _SVGBOB.sub(
        lambda m: (
            f'<svg xmlns="http://www.w3.org/2000/svg" class="diagram" width="{m[1]}" '
            f'height="{m[2]}" viewBox="0 0 {m[1]} {m[2]}">'
        ),
        html,
    )


def on_page_content(html: str, page: Any, config: Any, files: Any) -> str:
    return scalable_diagrams(html)
