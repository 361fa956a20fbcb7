"""Loading the plugin, as ``chatbridge providers`` and ``chatbridge check`` do, imports neither
slack-sdk nor aiohttp: the provider type is declared from ``bridge_slack.settings`` and the SDK
arrives with the first provider the factory builds (a fresh interpreter each time)."""

from __future__ import annotations

from bridge_core.testing.light_import import plugin_load_report

SDK = ("slack_sdk", "aiohttp")


def test_declaring_slack_imports_no_sdk_and_building_a_provider_does() -> None:
    report = plugin_load_report("bridge-slack", "slack", {"bot_token": "xoxb-light-import"})
    assert report.leaked_at_declare(SDK) == []
    assert "bridge_slack.settings" in report.declared
    assert report.provider == "SlackProvider"
    assert {"slack_sdk", "aiohttp"} <= report.built  # the check above can fail
