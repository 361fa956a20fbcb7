"""How long the CLI's plugin factory and config loading take, against floors measured here.

    python bench/plugin_startup.py

Floors: scanning the ``bridge_core`` entry-point group with ``importlib.metadata`` (what any
loader must do) and validating the same config data with pydantic alone (no env resolution, no
provider settings, no cross-checks).

Then the cold start, each in a fresh interpreter: building the plugin manager with every
installed plugin (what ``chatbridge providers`` and ``check`` do first) against the built-ins
alone (floor); the same with the platform SDKs imported as well (what loading the Slack, Discord
and Teams plugins cost while their entry-point modules imported their providers); and the
``chatbridge providers`` command end to end.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from _figures import Figure, print_table

from bridge_core.config import BridgeConfig, parse_config
from bridge_core.plugins import ENTRY_POINT_GROUP, create_plugin_manager


def paired(
    floor: Callable[[], Any], subject: Callable[[], Any], *, repeat: int
) -> tuple[float, float]:
    """Median wall times (ms) of ``floor`` and ``subject``, sampled alternately so that load from
    other processes on a shared machine hits both alike."""
    floors: list[float] = []
    subjects: list[float] = []
    for _ in range(repeat):
        for function, samples in ((floor, floors), (subject, subjects)):
            start = time.perf_counter()
            function()
            samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(floors), statistics.median(subjects)


_MANAGER = "from bridge_core.plugins import create_plugin_manager as m; m(load_entry_points={})"
# What the three plugins' entry-point modules imported before they declared from light modules.
_SDKS = (
    "import warnings; warnings.simplefilter('ignore', DeprecationWarning); "
    "import slack_sdk.web.async_client, discord, botbuilder.core, botframework.connector, "
    "msrest, jwt, aiohttp; "
)


def cold(command: list[str]) -> Callable[[], None]:
    def run() -> None:
        subprocess.run(command, check=True, capture_output=True)

    return run


_NAMES = {
    "every installed plugin": "plugins",
    "every plugin + the SDKs (before)": "plugins_and_sdks",
    "chatbridge providers --json": "chatbridge_providers",
}


def cold_start(*, repeat: int) -> list[Figure]:
    python = sys.executable
    floor_run = cold([python, "-c", _MANAGER.format(False)])
    subjects = {
        "every installed plugin": [python, "-c", _MANAGER.format(True)],
        "every plugin + the SDKs (before)": [python, "-c", _SDKS + _MANAGER.format(True)],
    }
    chatbridge = shutil.which("chatbridge", path=str(Path(python).parent))
    if chatbridge is not None:
        subjects["chatbridge providers --json"] = [chatbridge, "providers", "--json"]
    floors = []
    found = []
    for label, command in subjects.items():
        floor, subject = paired(floor_run, cold(command), repeat=repeat)
        floors.append(floor)
        print(f"cold: {label + ':':35} {subject:8.0f} ms   ratio {subject / floor:5.2f}x")
        found.append(
            Figure(
                name="startup.cold_" + _NAMES[label],
                value=subject,
                unit="ms",
                floor=floor,
                higher_is_better=False,
                label=f"cold start, {label} (floor: built-in providers only)",
            )
        )
    print(f"cold: {'built-in providers only (floor):':35} {statistics.median(floors):8.0f} ms")
    return found


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
    print_table(figures())


def figures(*, quick: bool = False) -> list[Figure]:
    """This module's figures (``bench/_figures.py``); ``quick``: fewer samples."""
    repeat = 10 if quick else 40
    create_plugin_manager()  # import every plugin module once, so runs compare like with like
    scan, manager = paired(
        lambda: list(entry_points(group=ENTRY_POINT_GROUP)),
        lambda: create_plugin_manager().providers,
        repeat=repeat,
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
        repeat=repeat,
    )
    print(f"pydantic validate, 200 channels (floor):  {floor:8.2f} ms")
    print(f"parse_config, 200 channels:               {full:8.2f} ms   ratio {full / floor:5.2f}x")

    found = [
        Figure(
            name="startup.plugin_manager",
            value=manager,
            unit="ms",
            floor=scan,
            higher_is_better=False,
            label="create_plugin_manager + registry (floor: entry-point scan)",
        ),
        Figure(
            name="startup.parse_config_200",
            value=full,
            unit="ms",
            floor=floor,
            higher_is_better=False,
            label="parse_config, 200 channels (floor: pydantic validate alone)",
        ),
    ]
    # A cold start is a fresh interpreter a sample: the quick run leaves it out (CI time).
    return found if quick else found + cold_start(repeat=7)


if __name__ == "__main__":
    main()
