"""Loading the plugin, as ``chatbridge providers`` and ``chatbridge check`` do, imports no HTTP
client: the provider type is declared from ``bridge_matrix.settings`` and httpx arrives with the
first provider the factory builds (a fresh interpreter each time)."""

from __future__ import annotations

from bridge_core.testing.light_import import plugin_load_report

HTTP = ("httpx", "bridge_matrix.client")


def test_declaring_matrix_imports_no_http_client_and_building_a_provider_does() -> None:
    settings = {
        "homeserver_url": "https://matrix.example.org",
        "user_id": "@bridge:example.org",
        "access_token": "syt_light_import",
    }
    report = plugin_load_report("bridge-matrix", "matrix", settings)
    assert report.leaked_at_declare(HTTP) == []
    assert "bridge_matrix.settings" in report.declared
    assert report.provider == "MatrixProvider"
    assert {"httpx", "bridge_matrix.client"} <= report.built  # the check above can fail
