"""A plugin "installed" for a test without pip: a one-module distribution as a ``.dist-info``
folder beside its module in a directory, which ``importlib.metadata`` (and so bridge-core's
plugin loading) finds once that directory is on ``sys.path`` or ``PYTHONPATH``."""

from __future__ import annotations

from pathlib import Path

__all__ = ["write_plugin"]


def write_plugin(
    site: Path, *, distribution: str, version: str, provider: str, source: str
) -> Path:
    """Write ``distribution`` (e.g. ``bridge-zulipish``) into ``site``: a module of that name
    holding ``source``, registered under the ``bridge_core`` entry point as ``provider``.
    Returns ``site``, to put on the path."""
    module = distribution.replace("-", "_")
    site.mkdir(parents=True, exist_ok=True)
    (site / f"{module}.py").write_text(source, encoding="utf-8")
    info = site / f"{module}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {distribution}\nVersion: {version}\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text(
        f"[bridge_core]\n{provider} = {module}\n", encoding="utf-8"
    )
    return site
