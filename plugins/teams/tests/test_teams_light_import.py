"""Loading the plugin, as ``chatbridge providers`` and ``chatbridge check`` do, imports none of
botbuilder, botframework-connector, msrest, requests, aiohttp or PyJWT: the provider type is
declared from ``bridge_teams.settings`` and the SDK arrives with the first provider the factory
builds (a fresh interpreter each time)."""

from __future__ import annotations

from bridge_core.testing.light_import import plugin_load_report

SDK = ("botbuilder", "botframework", "msrest", "requests", "aiohttp", "jwt")


def test_declaring_teams_imports_no_sdk_and_building_a_provider_does() -> None:
    settings = {"app_id": "app-light", "app_password": "light-import-password"}
    report = plugin_load_report("bridge-teams", "teams", settings)
    assert report.leaked_at_declare(SDK) == []
    assert "bridge_teams.settings" in report.declared
    assert report.provider == "TeamsProvider"
    assert {"botbuilder", "msrest", "jwt"} <= report.built  # the check above can fail
