"""Fixtures for the foundation tests: virtual-time backends and installed test distributions."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio.testing

FIXTURES = Path(__file__).parent / "fixtures"
TEST_DISTRIBUTIONS = ("bridge-echotest", "bridge-clashtest", "bridge-brokentest", "bridge-typotest")


@pytest.fixture(
    params=[
        pytest.param(("asyncio", {}), id="asyncio"),
        pytest.param(("trio", {"clock": "mock"}), id="trio"),
    ]
)
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    name, options = request.param
    if name == "trio":
        return ("trio", {"clock": trio.testing.MockClock(autojump_threshold=0)})
    return (name, options)


@pytest.fixture
def trio_backend() -> tuple[str, dict[str, Any]]:
    return ("trio", {"clock": trio.testing.MockClock(autojump_threshold=0)})


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def build_wheel(source: Path, out: Path) -> Path:
    """A pure-Python wheel of a fixture distribution, from its ``pyproject.toml``.

    Built by hand so the tests need no build backend or network: pip installs it like any wheel.
    """
    project = tomllib.loads((source / "pyproject.toml").read_text())["project"]
    name, version = project["name"], project["version"]
    stem = name.replace("-", "_")
    dist_info = f"{stem}-{version}.dist-info"
    files: dict[str, bytes] = {}
    for path in sorted(source.rglob("*.py")):
        if "__pycache__" not in path.parts:
            files[path.relative_to(source).as_posix()] = path.read_bytes()
    files[f"{dist_info}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        f"Summary: {project.get('description', '')}\n"
    ).encode()
    files[f"{dist_info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: bridge-core-tests\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n"
    )
    groups = project.get("entry-points", {})
    entry_points = "".join(
        f"[{group}]\n" + "".join(f"{key} = {value}\n" for key, value in eps.items()) + "\n"
        for group, eps in groups.items()
    )
    files[f"{dist_info}/entry_points.txt"] = entry_points.encode()
    record = "".join(f"{path},{_record_hash(data)},{len(data)}\n" for path, data in files.items())
    files[f"{dist_info}/RECORD"] = (record + f"{dist_info}/RECORD,,\n").encode()
    wheel = out / f"{stem}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
    return wheel


@pytest.fixture(scope="session")
def plugin_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory the test distributions were pip-installed into (``pip install --target``)."""
    wheels = tmp_path_factory.mktemp("wheels")
    target = tmp_path_factory.mktemp("site")
    built = [str(build_wheel(FIXTURES / dist, wheels)) for dist in TEST_DISTRIBUTIONS]
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            "--no-compile",
            "--disable-pip-version-check",
            "--target",
            str(target),
            *built,
        ],
        check=True,
    )
    return target


@pytest.fixture
def installed_plugins(plugin_site: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Put the test distributions on ``sys.path`` for one test, and forget them afterwards."""
    monkeypatch.syspath_prepend(str(plugin_site))
    yield plugin_site
    for module in list(sys.modules):
        if module.split(".")[0] in {d.replace("-", "_") for d in TEST_DISTRIBUTIONS}:
            del sys.modules[module]
