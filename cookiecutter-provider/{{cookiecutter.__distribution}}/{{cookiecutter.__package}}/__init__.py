"""bridge-core provider for {{ cookiecutter.provider_name }}.

The plugin module (``{{ cookiecutter.__package }}.plugin``) is what bridge-core loads through the
``bridge_core`` entry point; ``client`` speaks the platform's REST API with httpx and ``errors``
maps its answers onto bridge-core's error taxonomy.
"""

from {{ cookiecutter.__package }}.client import ApiClient
from {{ cookiecutter.__package }}.errors import error_from_exception, error_from_response
from {{ cookiecutter.__package }}.provider import (
    BUDGET,
    CAPABILITIES,
    MAX_LENGTH,
    {{ cookiecutter.__class_prefix }}Provider,
    {{ cookiecutter.__class_prefix }}Settings,
)

__all__ = [
    "BUDGET",
    "CAPABILITIES",
    "MAX_LENGTH",
    "{{ cookiecutter.__class_prefix }}Provider",
    "{{ cookiecutter.__class_prefix }}Settings",
    "ApiClient",
    "error_from_exception",
    "error_from_response",
]
