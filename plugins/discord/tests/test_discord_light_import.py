"""Loading the plugin, as ``chatbridge providers`` and ``chatbridge check`` do, imports neither
discord.py nor aiohttp: the provider type is declared from ``bridge_discord.settings`` and the
SDK arrives with the first provider the factory builds (a fresh interpreter each time)."""

from __future__ import annotations

from bridge_core.testing.light_import import plugin_load_report

SDK = ("discord", "aiohttp")


def test_declaring_discord_imports_no_sdk_and_building_a_provider_does() -> None:
    report = plugin_load_report("bridge-discord", "discord", {"token": "light-import-token"})
    assert report.leaked_at_declare(SDK) == []
    assert "bridge_discord.settings" in report.declared
    assert report.provider == "DiscordProvider"
    assert {"discord", "aiohttp"} <= report.built  # the check above can fail
