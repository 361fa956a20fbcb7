"""bridge-core provider for {{ cookiecutter.provider_name }}.

bridge-core loads the plugin module through the ``bridge_core`` entry point:
``{{ cookiecutter.__package }}.plugin``.
``settings`` declares the limits, capabilities, budget and settings model, and ``error_codes``
the platform's error codes; ``client`` speaks the platform's REST API with httpx and ``errors``
maps its answers onto bridge-core's error taxonomy.
The names that need httpx are imported on first use, so loading the plugin does not import it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from {{ cookiecutter.__package }}.error_codes import ERROR_CODES
from {{ cookiecutter.__package }}.plugin import create_provider, provider_type
from {{ cookiecutter.__package }}.settings import (
{%- for name in ["CAPABILITIES", "MAX_LENGTH", cookiecutter.__env_prefix ~ "_BUDGET"] | sort(case_sensitive=True) %}
    {{ name }},
{%- endfor %}
    {{ cookiecutter.__class_prefix }}Settings,
)

if TYPE_CHECKING:
    from {{ cookiecutter.__package }}.client import ApiClient
    from {{ cookiecutter.__package }}.errors import (
        map_error,
        map_exception,
    )
    from {{ cookiecutter.__package }}.provider import (
        {{ cookiecutter.__class_prefix }}Provider,
    )

__all__ = [
{%- for name in ["CAPABILITIES", "ERROR_CODES", "MAX_LENGTH", cookiecutter.__env_prefix ~ "_BUDGET"] | sort(case_sensitive=True) %}
    "{{ name }}",
{%- endfor %}
{#- Sorted when generated: where the class names fall depends on the platform's name. #}
{%- for name in ["ApiClient", cookiecutter.__class_prefix ~ "Provider", cookiecutter.__class_prefix ~ "Settings"] | sort(case_sensitive=True) %}
    "{{ name }}",
{%- endfor %}
    "create_provider",
    "map_error",
    "map_exception",
    "provider_type",
]

_SDK_NAMES = {
    "ApiClient": "{{ cookiecutter.__package }}.client",
    "map_error": "{{ cookiecutter.__package }}.errors",
    "map_exception": "{{ cookiecutter.__package }}.errors",
    "{{ cookiecutter.__class_prefix }}Provider": "{{ cookiecutter.__package }}.provider",
}


def __getattr__(name: str) -> Any:
    module = _SDK_NAMES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
