"""The provider template: generate a project, install it in a fresh virtual environment, and
check that bridge-core lists it and that its own tests pass with no edits.

This is the slowest test of the suite (a virtual environment and two editable installs: 50 to
70 s measured on a two-core machine at load 8; pip reuses its cache), and CI must run it: it is
the only proof that the template's entry point, packaging and tests work for someone who
starts from it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from cookiecutter.main import cookiecutter

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / "cookiecutter-provider"


def _environment() -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        # The outer environment must not leak in: plugin filters, the active venv, pytest's own.
        if not key.startswith(("CHATBRIDGE_", "PYTEST_", "VIRTUAL_ENV", "PYTHONPATH"))
    }
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _run(command: list[str], *, cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        command,
        cwd=cwd,
        env=_environment(),
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


def test_generated_provider_installs_is_listed_and_passes_its_tests(tmp_path: Path) -> None:
    project = Path(cookiecutter(str(TEMPLATE), no_input=True, output_dir=str(tmp_path / "out")))
    venv = tmp_path / "venv"
    # A fresh environment without pip of its own (ensurepip is slow); this interpreter's pip
    # installs into it with --python.
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp_path, timeout=120)
    python = venv / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-compile"]
    # setuptools first, then both editable builds in this environment: two isolated build
    # environments would cost more than the rest of the test.
    _run([*pip, "setuptools>=68"], cwd=tmp_path, timeout=300)
    _run(
        [*pip, "--no-build-isolation", "-e", str(REPO), "-e", f"{project}[test]"],
        cwd=tmp_path,
        timeout=600,
    )

    listed = _run(
        [str(venv / "bin" / "chatbridge"), "providers", "--json"], cwd=tmp_path, timeout=120
    )
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
        [str(venv / "bin" / "chatbridge"), "check", "--json", "-c", str(tmp_path / "bridge.toml")],
        cwd=tmp_path,
        env={**_environment(), "ACME_CHAT_TOKEN": "token-from-the-environment"},
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

    tests = _run(
        [str(python), "-m", "pytest", "-v", "-p", "no:cacheprovider"], cwd=project, timeout=600
    )
    summary = tests.stdout.strip().splitlines()[-1]
    assert " passed" in summary and "failed" not in summary and "error" not in summary, summary
    # The conformance suite and the respx client tests both ran, and passed.
    for name in (
        "TestAcmeChatConformance::test_fault_maps_onto_the_taxonomy[rate_limited-post] PASSED",
        "TestAcmeChatConformance::test_secrets_never_leak PASSED",
        "test_client.py::test_a_429_with_retry_after_is_rate_limited_with_that_wait PASSED",
        "test_plugin.py::test_bridge_core_lists_the_provider_with_its_distribution PASSED",
    ):
        assert name in tests.stdout, f"{name!r} not in the generated project's test run"
