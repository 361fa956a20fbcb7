"""The documentation site: it builds with ``mkdocs build --strict``, and the pages generated from
the code (the config reference, the error table, the metrics, the CLI, the decision index) say
what the code says."""

from __future__ import annotations

import html as html_module
import importlib.util
import json
import re
import sys
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field, SecretStr

from bridge_core.config import BridgeConfig, parse_config
from bridge_core.plugins import create_plugin_manager
from bridge_core.provider import ERROR_TABLE

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"


def _load_hooks() -> ModuleType:
    """Load ``docs/hooks.py`` the way mkdocs does: its folder on ``sys.path`` while it loads."""
    spec = importlib.util.spec_from_file_location("bridge_docs_hooks", DOCS / "hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(DOCS))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(DOCS))
    return module


hooks = _load_hooks()
docgen_config = sys.modules["bridge_docgen.config"]
docgen_text = sys.modules["bridge_docgen.text"]
docgen_tables = sys.modules["bridge_docgen.code_tables"]


def page(site: Path, name: str) -> str:
    return (site / name / "index.html").read_text(encoding="utf-8")


# --------------------------------------------------------------------------- the build


def test_every_page_of_the_nav_is_built(site: Path) -> None:
    for source in DOCS.rglob("*.md"):
        relative = source.relative_to(DOCS)
        if relative.name == "index.md":
            built = site / relative.parent / "index.html"
        else:
            built = site / relative.with_suffix("") / "index.html"
        assert built.is_file(), f"{relative} was not built"
    names = {p.name for p in site.rglob("*")}
    assert "hooks.py" not in names and "bridge_docgen" not in names


def test_no_marker_is_left_unexpanded(site: Path) -> None:
    for html in site.rglob("*.html"):
        # An unexpanded marker would pass through markdown as a raw HTML comment.
        assert "<!-- generated:" not in html.read_text(encoding="utf-8"), html


def test_the_config_reference_lists_every_key_of_every_model(site: Path) -> None:
    html = page(site, "configuration")
    models: list[type[BaseModel]] = [BridgeConfig]
    seen: set[type[BaseModel]] = set()
    while models:
        model = models.pop()
        if model in seen:
            continue
        seen.add(model)
        for name, field in model.model_fields.items():
            if field.exclude:
                continue
            assert f"<code>{field.alias or name}</code>" in html, f"{model.__name__}.{name}"
            models.extend(docgen_text.models_in(field.annotation))
    assert len(seen) >= 5
    # Defaults come from the models too.
    assert "<code>8787</code>" in html
    assert '<code>"embedded"</code>' in html


def test_the_error_table_is_the_code_table(site: Path) -> None:
    html = page(site, "plugins/errors")
    for reading in ERROR_TABLE:
        assert f"<code>{reading.error.__name__}</code>" in html
        assert reading.notifier.value.replace("'", "&#x27;").split(";")[0] in html
        assert reading.ledger.value.split(";")[0] in html


def test_the_budget_presets_are_the_code_presets(site: Path) -> None:
    html = page(site, "concepts/notifications")
    for name, budget in create_plugin_manager().providers.budget_presets.items():
        assert f"<code>{name}</code>" in html
        for window in budget.windows:
            assert f"{window.limit:,} in" in html


def test_every_decision_record_is_listed(site: Path) -> None:
    html = page(site, "adr")
    records = sorted((DOCS / "adr").glob("[0-9][0-9][0-9][0-9]-*.md"))
    assert records, "no decision records in docs/adr"
    for record in records:
        assert f'href="{record.stem}/"' in html, f"{record.name} is not in the ADR index"


def test_every_hookspec_is_documented_with_its_signature(site: Path) -> None:
    html = page(site, "plugins/hooks")
    names = docgen_tables.hookspec_names()
    assert "register_providers" in names
    for name in names:
        assert f'id="{name}"' in html, f"no section for hook {name}"
        assert f'href="#{name}"' in html


def test_the_metrics_page_lists_what_metrics_expose(site: Path) -> None:
    from bridge_core.runtime.metrics import GatewayMetrics

    html = page(site, "operations/metrics")
    families = list(GatewayMetrics().registry.collect())
    assert families
    for family in families:
        assert family.name in html


def test_the_cli_reference_has_every_command(site: Path) -> None:
    import click

    from bridge_core.cli import build_cli

    html = page(site, "cli")
    group = build_cli()
    with click.Context(group) as ctx:
        names = group.list_commands(ctx)
    assert "providers" in names
    for name in names:
        assert f"chatbridge {name}" in html


def test_getting_started_shows_the_readme_commands(site: Path) -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    html = page(site, "getting-started")
    for kind in ("demo", "test"):
        block = re.search(rf"<!-- {kind}-command -->\s*```bash\n(.*?)\n```", readme, re.S)
        assert block is not None, f"README.md lost its {kind} command block"
        command = block.group(1).strip()
        # Pygments splits the command into spans; the text a reader sees is the command.
        assert command in html_module.unescape(re.sub(r"<[^>]+>", "", html))


def test_code_is_highlighted_when_built_and_no_page_loads_anything_from_elsewhere(
    site: Path,
) -> None:
    html = page(site, "configuration")
    # Pygments' token spans inside the highlight block: done at build time, not by a script.
    assert re.search(r'highlight"><pre><span></span><code><span class="c1"># Bots', html)
    for built in site.rglob("*.html"):
        text = built.read_text(encoding="utf-8")
        remote = re.findall(r'<(?:script|link|img)[^>]+(?:src|href)="(?:https?:)?//[^"]+"', text)
        assert remote == [], f"{built.relative_to(site)} loads {remote[:3]}"


# --------------------------------------------------------------------------- the generators


class Inner(BaseModel):
    """An inner table."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    depth: int = Field(default=3, description="How deep.")


class Outer(BaseModel):
    """The top."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    name: str = Field(description="A name.")
    flag: bool = True
    """Whether ``flag`` is set."""
    mode: Literal["fast", "slow"] = "fast"
    secret: SecretStr | None = None
    where: Path | None = None
    inners: dict[str, Inner] = Field(default_factory=dict)
    listed: list[Inner] | None = None
    hidden: int = Field(default=0, exclude=True)


def test_render_model_walks_nested_tables() -> None:
    text = docgen_config.render_model(Outer)
    assert "### Top level" in text
    assert "| `name` | `str` | **required** | A name. |" in text
    # An attribute docstring is a description; its reStructuredText literals read as markdown.
    assert "| `flag` | `bool` | `true` | Whether `flag` is set. |" in text
    # Types as a config author writes them: TOML strings, secrets, paths, tables.
    assert '| `mode` | `"fast" | "slow"` | `"fast"` |  |' in text
    assert '| `secret` | `secret ({ env = "NAME" })` | not set |' in text
    assert "| `where` | `path` | not set |" in text
    assert "| `inners` | `dict[str, table]` | `{}` |" in text
    assert "| `listed` | `list[table]` | not set |" in text
    assert "### `[inners.<name>]`, `[[listed]]`" in text
    assert "| `depth` | `int` | `3` | How deep. |" in text
    assert "hidden" not in text


def _table_rows(markdown: str) -> list[list[str]]:
    """The body rows of every key table, split into their four cells (pipes inside code spans,
    as in a type ``"a" | "b"``, do not split a cell)."""
    rows = []
    for line in markdown.splitlines():
        if line.startswith("| `") and line.endswith(" |"):
            cells, current, in_code = [], "", False
            for char in line[2:-2]:
                if char == "`":
                    in_code = not in_code
                if char == "|" and not in_code and not current.endswith("\\"):
                    cells.append(current.strip())
                    current = ""
                else:
                    current += char
            cells.append(current.strip())
            rows.append(cells)
    return rows


def test_every_key_in_the_generated_reference_has_a_description() -> None:
    """The reference's description column is never blank: for the core keys and for the
    settings of every provider installed where the site is built."""
    rows = _table_rows(docgen_config.config_reference())
    rows += _table_rows(docgen_config.provider_settings())
    assert len(rows) >= 60
    assert all(len(row) == 4 for row in rows), [row for row in rows if len(row) != 4]
    blank = [row[0] for row in rows if not row[3]]
    assert blank == [], f"keys shown without a description in docs/configuration.md: {blank}"


def test_an_unknown_marker_fails_the_build() -> None:
    with pytest.raises(KeyError, match="no-such-block"):
        hooks.expand_markers("<!-- generated: no-such-block -->\n", where="x.md")


def test_a_marker_keeps_the_blank_lines_around_it() -> None:
    out = hooks.expand_markers("a\n\n<!-- generated: budget-presets -->\n\n## Next\n")
    assert "|\n\n## Next" in out


def test_links_out_of_the_docs_become_paths() -> None:
    text = "see [the store](../../bridge_core/ledger/store.py) and [b](0002-x.md)"
    out = hooks._rewrite_outside_links(text, "adr/0001-a.md")
    assert out == "see the store (`bridge_core/ledger/store.py`) and [b](0002-x.md)"


def test_toml_examples_in_the_docs_are_valid_config() -> None:
    """Every TOML example with profiles or channels loads with the real config loader."""
    from bridge_core.plugins import create_plugin_manager

    providers = create_plugin_manager().providers
    checked = 0
    for source in sorted(DOCS.rglob("*.md")):
        if source.parent.name == "adr":
            continue
        for block in re.findall(r"```toml\n(.*?)```", source.read_text(encoding="utf-8"), re.S):
            data = tomllib.loads(block)
            if not {"profiles", "channels", "stores"} & set(data):
                continue
            # Values shaped like the real secrets, which some settings models check.
            shapes = {"SLACK_APP_TOKEN": "xapp-0000-docs", "SLACK_BOT_TOKEN": "xoxb-0000-docs"}
            environ = {
                name: shapes.get(name, "docs-secret")
                for name in re.findall(r'env = "(\w+)"', block)
            }
            if "channels" in data and "profiles" not in data:
                continue  # a fragment continuing an earlier example
            # The README's test command installs every plugin in plugins/, so every provider a
            # page shows is installed; a missing one fails here with the installed ones named.
            parse_config(data, providers=providers, environ=environ)
            checked += 1
    assert checked >= 3


def test_the_kit_page_lists_every_testing_module(site: Path) -> None:
    import pkgutil

    import bridge_core.testing as kit

    html = page(site, "plugins/kit")
    names = [info.name for info in pkgutil.iter_modules(kit.__path__)]
    assert "conformance" in names and "fake_platform" in names
    for name in names:
        assert f"<code>bridge_core.testing.{name}</code>" in html


def test_the_events_page_lists_every_kind_with_valid_json(site: Path) -> None:
    from bridge_core import events

    html = page(site, "events")
    kinds = [kind for kind in events.NOTIFYING_KINDS] + ["Output", "ToolStarted", "RepoHealth"]
    for kind in kinds:
        assert f"<code>{kind}</code>" in html
    samples = re.findall(r"<code>(\{(?:&quot;|\")kind.*?\})</code>", html)
    assert len(samples) >= 10
    for sample in samples:
        parsed = events.parse_event(json.loads(html_module.unescape(sample)))
        assert not isinstance(parsed, events.UnknownEvent)


def test_the_provider_type_fields_are_all_described(site: Path) -> None:
    import dataclasses

    from bridge_core.hookspecs import ProviderContext, ProviderType

    html = page(site, "plugins/hooks")
    for field in dataclasses.fields(ProviderType):
        if field.name == "distribution":  # filled in by the loader, not by the plugin
            continue
        assert f"<td><code>{field.name}</code></td>" in html, f"ProviderType.{field.name}"
    for field in dataclasses.fields(ProviderContext):
        assert f"<code>{field.name}</code>" in html, f"ProviderContext.{field.name}"


def test_the_provider_contract_page_names_every_method_and_capability(site: Path) -> None:
    import dataclasses
    import inspect

    from bridge_core.provider import Capabilities, ChatProvider

    html = page(site, "plugins")
    methods = [
        name
        for name, member in inspect.getmembers(ChatProvider)
        if not name.startswith("_") and inspect.isfunction(member)
    ]
    assert {"post", "edit", "probe", "receive", "http_routes", "escape", "aclose"} <= set(methods)
    for name in methods:
        assert name in html, f"ChatProvider.{name} is not described in plugins/index.md"
    for field in dataclasses.fields(Capabilities):
        assert field.name in html, f"Capabilities.{field.name} is not described"


def test_no_escaped_pipe_shows_in_the_site(site: Path) -> None:
    """A pipe escaped for a table must not show its backslash (inside code spans it would)."""
    for html in site.rglob("*.html"):
        assert "\\|" not in html.read_text(encoding="utf-8"), html


def test_cells_escape_pipes_only_outside_code() -> None:
    assert docgen_text.cell("a | b `x | y`\n c") == "a \\| b `x | y` c"


def test_the_errors_page_has_every_code_of_the_installed_plugins(site: Path) -> None:
    html = page(site, "plugins/errors")
    checked = 0
    for entry in create_plugin_manager().providers.entries():
        for code, (error, _meaning) in (entry.type.error_codes or {}).items():
            assert f"<code>{code}</code>" in html, f"{entry.type.name}: {code}"
            assert f"<code>{error.__name__}</code>" in html
            checked += 1
    assert checked > 0, "no plugin installed: the README's test command installs them all"


def test_the_agent_example_runs(tmp_path: Path) -> None:
    """The example on the agents page is a working agent: it answers, and it says busy."""
    import anyio

    from bridge_core.conversation import Turn
    from bridge_core.ownership import AgentBusy
    from bridge_core.runtime.agents import load_agent

    text = (DOCS / "agents.md").read_text(encoding="utf-8")
    code = re.search(r"```python\n(.*?)```", text, re.S)
    assert code is not None
    (tmp_path / "docs_example_agent.py").write_text(code.group(1), encoding="utf-8")
    sys.path.insert(0, str(tmp_path))
    try:
        agent = load_agent("docs_example_agent:answer")
        module = sys.modules["docs_example_agent"]
    finally:
        sys.path.remove(str(tmp_path))
    first = Turn("C1", "C1/u/ann", 1, 10.0, "m1", "ann", "hello")
    second = Turn("C1", "C1/u/ann", 2, 11.0, "m2", "ann", "again")

    async def scenario() -> None:
        reply = await agent(second, [first, second])
        assert reply == "You said 'again' (1 earlier messages here)."
        setattr(module, "running", module.MAX_AT_ONCE)  # noqa: B010 - a module made at run time
        with pytest.raises(AgentBusy):
            await agent(second, [second])

    anyio.run(scenario)


def test_the_streaming_page_draws_a_real_simulate_run(site: Path) -> None:
    page = (site / "concepts" / "streaming" / "index.html").read_text(encoding="utf-8")
    assert "<svg" in page and "timeline of one streamed reply" in page
    dots = page.count("<circle")
    posts, edits = (int(n) for n in re.findall(r"(\d+) post and (\d+) edits", page)[0])
    assert dots == posts + edits and posts == 1 and 3 <= edits <= 8
