"""The provider template: generate a project, run exactly the commands its README gives (a fresh
virtual environment, bridge-core from this checkout, the project, its tests), and check that
bridge-core lists it and that its ruff settings pass on the code generated for any name.

The README's commands are the slowest setup of the suite (a virtual environment and two installs
with build isolation, as a user runs them; pip reuses its cache), and CI must run them: they are
the only proof that the template's entry point, packaging, tests and instructions work for
someone who starts from it. They start when collection ends, beside the other tests
(``conftest.py``), and the test waits for what is left of them.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from cookiecutter.main import cookiecutter

from .conftest import REPO, TEMPLATE, ReadmeProject, clean_environment, readme_commands


def _run(command: list[str], *, cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        command,
        cwd=cwd,
        env=clean_environment(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if result.returncode != 0:
        pytest.fail(
            f"{' '.join(command)} exited {result.returncode}\n"
            f"--- stdout ---\n{result.stdout[-6000:]}\n--- stderr ---\n{result.stderr[-6000:]}"
        )
    return result


def test_cookiecutter_json_derives_the_names() -> None:
    context = json.loads((TEMPLATE / "cookiecutter.json").read_text(encoding="utf-8"))
    prompted = [key for key in context if not key.startswith("_")]
    assert prompted == ["provider_name", "author"]
    for derived in ("__hyphenated", "__underscored", "__distribution", "__package"):
        assert derived in context


def test_generated_names(tmp_path: Path) -> None:
    project = Path(
        cookiecutter(
            str(TEMPLATE),
            no_input=True,
            output_dir=str(tmp_path),
            extra_context={"provider_name": "Zulu Talk.io", "author": "A. Person"},
        )
    )
    assert project.name == "bridge-zulu-talk-io"
    assert (project / "bridge_zulu_talk_io" / "plugin.py").is_file()
    pyproject = (project / "pyproject.toml").read_text(encoding="utf-8")
    assert 'name = "bridge-zulu-talk-io"' in pyproject
    assert 'zulu-talk-io = "bridge_zulu_talk_io.plugin"' in pyproject
    assert '"bridge-core>=0.1,<0.2"' in pyproject
    assert 'authors = [{ name = "A. Person" }]' in pyproject
    leftovers = [
        str(path.relative_to(project))
        for path in project.rglob("*")
        if path.is_file()
        and ("{{" in (text := path.read_text(encoding="utf-8")) or "cookiecutter." in text)
    ]
    assert leftovers == [], f"unrendered template variables in {leftovers}"


def test_the_readme_installs_bridge_core_from_this_checkout(tmp_path: Path) -> None:
    project = Path(cookiecutter(str(TEMPLATE), no_input=True, output_dir=str(tmp_path)))
    commands = readme_commands(project).splitlines()
    # bridge-core from the checkout, before the project, whose own install then finds it
    # installed instead of asking an index that does not have it.
    assert commands[:3] == [
        "python -m venv .venv",
        f".venv/bin/pip install {REPO}",
        ".venv/bin/pip install -e '.[test]'",
    ], commands


@pytest.mark.parametrize(
    "name", ["Zulip", "Acme Chat", "Zulu Talk.io", "Web3 Chat", "Rocket Chat Enterprise Edition"]
)
def test_ruff_passes_on_the_generated_code(tmp_path: Path, name: str) -> None:
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    assert ruff is not None, "ruff is in the test extra; install it"
    project = Path(
        cookiecutter(
            str(TEMPLATE),
            no_input=True,
            output_dir=str(tmp_path),
            extra_context={"provider_name": name},
        )
    )
    # --isolated would drop the project's own settings; run from inside it so they apply.
    _run([ruff, "check", "--no-cache", "."], cwd=project, timeout=60)
    _run([ruff, "format", "--check", "--no-cache", "."], cwd=project, timeout=60)


def test_the_readme_commands_install_the_project_and_its_tests_pass(
    readme_project: ReadmeProject, tmp_path: Path
) -> None:
    project, stdout = readme_project.path, readme_project.stdout
    # The conformance suite, the respx client tests and the plugin's tests all ran, and passed.
    assert re.search(r"^=+ \d+ passed", stdout, re.M), stdout[-3000:]
    for name in (
        "TestAcmeChatConformance::test_fault_maps_onto_the_taxonomy[rate_limited-post] PASSED",
        "TestAcmeChatConformance::test_secrets_never_leak PASSED",
        "test_client.py::test_a_429_with_retry_after_is_rate_limited_with_that_wait PASSED",
        "test_plugin.py::test_bridge_core_lists_the_provider_with_its_distribution PASSED",
    ):
        assert name in stdout, f"{name!r} not in the generated project's test run"
    # The README's last command, `chatbridge providers`, lists the new provider.
    assert re.search(r"│ acme-chat\s+│ bridge-ac", stdout), stdout[-2000:]

    chatbridge = project / ".venv" / "bin" / "chatbridge"
    listed = _run([str(chatbridge), "providers", "--json"], cwd=tmp_path, timeout=120)
    providers = {entry["name"]: entry for entry in json.loads(listed.stdout)["providers"]}
    assert "acme-chat" in providers, f"not listed: {sorted(providers)}"
    assert providers["acme-chat"]["distribution"] == "bridge-acme-chat"
    assert providers["acme-chat"]["capabilities"]["edit"] is True
    assert providers["acme-chat"]["budget"]["burst"] == 3
    assert "console" in providers

    # The README's example config passes `chatbridge check` with the generated provider.
    readme = (project / "README.md").read_text(encoding="utf-8")
    example = re.search(r"```toml\n(.*?)```", readme, re.S)
    assert example is not None, "the generated README has no TOML example"
    (tmp_path / "bridge.toml").write_text(example.group(1), encoding="utf-8")
    variables = re.findall(r'env = "(\w+)"', example.group(1))
    assert variables == ["ACME_CHAT_TOKEN"]
    checked = subprocess.run(
        [str(chatbridge), "check", "--json", "-c", str(tmp_path / "bridge.toml")],
        cwd=tmp_path,
        env={**clean_environment(), "ACME_CHAT_TOKEN": "token-from-the-environment"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    resolved = json.loads(checked.stdout)
    assert resolved["profiles"]["acme-chat-bot"]["provider"] == "acme-chat"
    assert resolved["profiles"]["acme-chat-bot"]["distribution"] == "bridge-acme-chat"
    assert "token-from-the-environment" not in checked.stdout + checked.stderr


def test_every_plugin_pins_the_core_minor_version_as_the_docs_say() -> None:
    # docs/operations/upgrading.md: plugins depend on `bridge-core>=0.N,<0.N+1`, the hooks and the
    # vocabulary being versioned with the core's minor version.
    core = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    major, minor = (int(part) for part in core["project"]["version"].split(".")[:2])
    expected = f"bridge-core>={major}.{minor},<{major}.{minor + 1}"
    assert f"`{expected}`" in (REPO / "docs/operations/upgrading.md").read_text(encoding="utf-8")
    template = (TEMPLATE / "{{cookiecutter.__distribution}}" / "pyproject.toml").read_text(
        encoding="utf-8"
    )
    pins = {"cookiecutter-provider": re.findall(r'"(bridge-core[^"]*)"', template)}
    for pyproject in sorted(REPO.glob("plugins/*/pyproject.toml")):
        dependencies = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
        pins[pyproject.parent.name] = [
            dependency
            for dependency in dependencies["dependencies"]
            if re.match(r"bridge-core\b", dependency)
        ]
    assert len(pins) >= 4, pins
    assert {name: [expected] for name in pins} == pins
