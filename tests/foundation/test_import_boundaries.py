"""The architecture's import rules, checked on the source (docs/architecture.md).

- The vocabulary (``errors``, ``provider``, ``events``, ``conversation``, ``text``) imports
  nothing else of the project.
- The libraries (``sending``, ``notify``, ``ledger``, ``inbound``, ``ownership``, ``streams``)
  import the vocabulary only: never each other, the runtime, the CLI, the config or the plugin
  machinery.
- A provider plugin imports ``bridge_core`` itself (its public API) and ``bridge_core.testing``,
  nothing below them.
- No module-level import cycle among the core's modules (an import inside a function or under
  ``TYPE_CHECKING`` is not one: it cannot run half-initialised).

The rules are read from the AST, so a lazy import inside a function counts for the boundaries:
a library that reaches into the runtime lazily still depends on it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CORE = "bridge_core"
VOCABULARY = ("errors", "provider", "events", "conversation", "text")
LIBRARIES = ("sending", "notify", "ledger", "inbound", "ownership", "streams")
PLUGIN_MAY_IMPORT = (CORE, f"{CORE}.testing")


@dataclass(frozen=True)
class Import:
    importer: str  # dotted module name
    target: str  # dotted module name, or module.name for ``from m import name``
    module_level: bool  # runs when the importer is imported (not in a function, not TYPE_CHECKING)
    line: int


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(path: Path, root: Path) -> Iterator[Import]:
    """Every import in one file, resolved to absolute dotted names."""
    importer = module_name(path, root)
    package = importer if path.name == "__init__.py" else importer.rpartition(".")[0]

    def walk(node: ast.AST, *, module_level: bool) -> Iterator[Import]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                for alias in child.names:
                    yield Import(importer, alias.name, module_level, child.lineno)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")[: len(package.split(".")) - (child.level - 1)]
                    source = ".".join([*base, *([child.module] if child.module else [])])
                else:
                    source = child.module or ""
                yield Import(importer, source, module_level, child.lineno)
                for alias in child.names:
                    yield Import(importer, f"{source}.{alias.name}", module_level, child.lineno)
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                yield from walk(child, module_level=False)
            elif isinstance(child, ast.If) and _is_type_checking(child):
                yield from walk(child, module_level=False)
            else:
                yield from walk(child, module_level=module_level)

    yield from walk(ast.parse(path.read_text(), filename=str(path)), module_level=True)


def collect(root: Path, *top_level: str) -> list[Import]:
    found: list[Import] = []
    for name in top_level:
        for path in sorted((root / name).rglob("*.py")):
            found.extend(imports_of(path, root))
    return found


def _area(module: str) -> str | None:
    """The second part of a core module's name (``bridge_core.ledger.sqlite`` -> ``ledger``)."""
    parts = module.split(".")
    if parts[0] != CORE:
        return None
    return parts[1] if len(parts) > 1 else ""


def boundary_violations(imports: list[Import]) -> list[str]:
    problems = []
    seen: set[tuple[str, int]] = set()  # ``from m import a, b`` is one import statement
    for item in imports:
        source, target = _area(item.importer), _area(item.target)
        if source is None or target is None or target == "" or source == target:
            continue
        if (item.importer, item.line) in seen:
            continue
        where = f"{item.importer} (line {item.line}) imports {item.target}"
        if source in VOCABULARY and target not in VOCABULARY:
            problems.append(f"{where}: the vocabulary imports nothing else of the project")
            seen.add((item.importer, item.line))
        if source in LIBRARIES and target not in VOCABULARY:
            problems.append(f"{where}: {source}/ may import only the vocabulary {VOCABULARY}")
            seen.add((item.importer, item.line))
    return problems


def plugin_violations(imports: list[Import]) -> list[str]:
    problems = []
    seen: set[tuple[str, int]] = set()  # ``from m import a, b`` is one import statement
    for item in imports:
        if not item.target.startswith(f"{CORE}.") or item.importer.startswith(CORE):
            continue
        if (item.importer, item.line) in seen:
            continue
        allowed = any(
            item.target == allowed or item.target.rpartition(".")[0] == allowed
            for allowed in PLUGIN_MAY_IMPORT
        )
        # ``from bridge_core import Name`` resolves to bridge_core.Name: public API, allowed.
        if not allowed:
            seen.add((item.importer, item.line))
            problems.append(
                f"{item.importer} (line {item.line}) imports {item.target}: a plugin imports "
                f"only {CORE}'s public API and {CORE}.testing"
            )
    return problems


def import_cycles(imports: list[Import], modules: set[str]) -> list[list[str]]:
    graph: dict[str, set[str]] = {module: set() for module in modules}
    for item in imports:
        if not item.module_level or item.importer not in graph:
            continue
        # ``from package import name`` may name a submodule or an attribute: take the module.
        target = item.target if item.target in modules else item.target.rpartition(".")[0]
        if target in modules and target != item.importer:
            graph[item.importer].add(target)
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        stack.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                cycles.append([*stack[stack.index(target) :], target])
            elif target not in state:
                visit(target)
        stack.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)
    return cycles


def core_modules(root: Path) -> set[str]:
    return {module_name(path, root) for path in (root / CORE).rglob("*.py")}


def plugin_packages(root: Path) -> list[tuple[Path, str]]:
    """(the plugin's folder, its import package) for every plugin in ``plugins/``."""
    return sorted(
        (package.parent, package.name)
        for package in root.glob("plugins/*/bridge_*")
        if (package / "__init__.py").is_file()
    )


# ------------------------------------------------------------------ the rules, on this tree


def test_the_libraries_and_the_vocabulary_keep_their_boundaries() -> None:
    imports = collect(ROOT, CORE)
    assert {_area(item.importer) for item in imports} >= {*LIBRARIES, *VOCABULARY}
    assert boundary_violations(imports) == []


def test_plugins_import_only_the_public_api_and_the_testing_kit() -> None:
    packages = plugin_packages(ROOT)
    assert len(packages) >= 3, packages
    imports = [item for folder, package in packages for item in collect(folder, package)]
    assert any(item.target.startswith(CORE) for item in imports)
    assert plugin_violations(imports) == []


def test_the_core_has_no_module_level_import_cycle() -> None:
    modules = core_modules(ROOT)
    assert import_cycles(collect(ROOT, CORE), modules) == []


# ------------------------------------------------------------------ the checker can fail


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_checker_reports_a_library_reaching_into_another(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "bridge_core/__init__.py": "",
            "bridge_core/provider.py": "",
            "bridge_core/ledger/__init__.py": "from bridge_core.provider import X\n",
            "bridge_core/ledger/engine.py": (
                "def later():\n    from ..sending.sender import Sender\n"
            ),
            "bridge_core/text.py": "from bridge_core.runtime import gateway\n",
        },
    )
    problems = boundary_violations(collect(tmp_path, CORE))
    assert len(problems) == 2, problems
    assert "bridge_core.ledger.engine (line 2) imports bridge_core.sending.sender" in problems[0]
    assert "bridge_core.text" in problems[1]


def test_the_checker_reports_a_plugin_reaching_past_the_public_api(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "bridge_x/__init__.py": (
                "from bridge_core import hookimpl\n"
                "from bridge_core.testing import conformance\n"
                "from bridge_core.sending.sender import Sender\n"
            ),
        },
    )
    problems = plugin_violations(collect(tmp_path, "bridge_x"))
    assert len(problems) == 1 and "bridge_core.sending.sender" in problems[0], problems


@pytest.mark.parametrize("lazy", [False, True])
def test_the_checker_finds_a_cycle_only_at_module_level(tmp_path: Path, lazy: bool) -> None:
    back = "def f():\n    from bridge_core import a\n" if lazy else "from bridge_core import a\n"
    _write(
        tmp_path,
        {
            "bridge_core/__init__.py": "",
            "bridge_core/a.py": "from bridge_core.b import thing\n",
            "bridge_core/b.py": back,
        },
    )
    cycles = import_cycles(collect(tmp_path, CORE), core_modules(tmp_path))
    assert cycles == ([] if lazy else [["bridge_core.a", "bridge_core.b", "bridge_core.a"]])
