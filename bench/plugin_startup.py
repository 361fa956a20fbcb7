"""How long the CLI's plugin factory and config loading take, against floors measured here.

    python bench/plugin_startup.py

Floors: scanning the ``bridge_core`` entry-point group with ``importlib.metadata`` (what any
loader must do) and validating the same config data with pydantic alone (no env resolution, no
provider settings, no cross-checks).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

from bridge_core.config import BridgeConfig, parse_config
from bridge_core.plugins import ENTRY_POINT_GROUP, create_plugin_manager


def paired(
    floor: Callable[[], Any], subject: Callable[[], Any], *, repeat: int
) -> tuple[float, float]:
    """Median wall times (ms) of ``floor`` and ``subject``, sampled alternately so that load from
    other processes on a shared machine hits both alike."""
    floors, subjects = [], []
    for _ in range(repeat):
        for function, samples in ((floor, floors), (subject, subjects)):
            start = time.perf_counter()
            function()
            samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(floors), statistics.median(subjects)


def config_data(channels: int) -> dict[str, Any]:
    return {
        "profiles": {
            f"p{i}": {"provider": "console", "settings": {"output": "none"}, "budget": "slack"}
            for i in range(5)
        },
        "channels": {
            f"c{i}": {"profile": f"p{i % 5}", "channel_id": f"C{i}", "notify": {"hold": 1.0}}
            for i in range(channels)
        },
        "api": {"token": {"env": "BENCH_TOKEN"}},
    }


def main() -> None:
    create_plugin_manager()  # import every plugin module once, so runs compare like with like
    scan, manager = paired(
        lambda: list(entry_points(group=ENTRY_POINT_GROUP)),
        lambda: create_plugin_manager().providers,
        repeat=40,
    )
    print(f"entry-point scan (floor):                 {scan:8.2f} ms")
    print(
        f"create_plugin_manager + registry:         {manager:8.2f} ms  ratio {manager / scan:5.2f}x"
    )

    providers = create_plugin_manager().providers
    data = config_data(200)
    raw = {**data, "api": {}}
    floor, full = paired(
        lambda: BridgeConfig.model_validate(raw),
        lambda: parse_config(data, providers=providers, environ={"BENCH_TOKEN": "x"}),
        repeat=40,
    )
    print(f"pydantic validate, 200 channels (floor):  {floor:8.2f} ms")
    print(f"parse_config, 200 channels:               {full:8.2f} ms   ratio {full / floor:5.2f}x")


if __name__ == "__main__":
    main()
