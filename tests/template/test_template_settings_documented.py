"""The provider template's settings model describes every key, as bridge-core's own models do
(ADR 0062), so a provider started from it shows a full row for each key in the configuration
reference and passes the conformance kit's ``test_settings_are_documented`` (which the generated
project's own suite runs, in test_cookiecutter_provider.py). Fast: the generated settings module is
imported here, nothing is installed."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
from cookiecutter.main import cookiecutter
from pydantic import BaseModel

from bridge_core.testing.config_docs import undescribed_fields, undocumented_models

TEMPLATE = Path(__file__).resolve().parents[2] / "cookiecutter-provider"


def test_every_settings_field_of_the_template_has_a_description(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = Path(
        cookiecutter(
            str(TEMPLATE),
            no_input=True,
            output_dir=str(tmp_path),
            extra_context={"provider_name": "Docs Check", "author": "A. Person"},
        )
    )
    monkeypatch.syspath_prepend(str(project))
    try:
        settings = importlib.import_module("bridge_docs_check.settings")
    finally:
        for name in [m for m in sys.modules if m.split(".")[0] == "bridge_docs_check"]:
            del sys.modules[name]
    model = settings.DocsCheckSettings
    assert issubclass(model, BaseModel)
    assert {"token", "api_base_url", "timeout"} <= set(model.model_fields)
    # The rule the core's models and the conformance kit's test_settings_are_documented follow.
    assert undescribed_fields(model) == []
    assert undocumented_models(model) == []
