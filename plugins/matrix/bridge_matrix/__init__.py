"""bridge-matrix: the Matrix provider plugin for bridge-core, on httpx.

Installed, it registers the provider type ``matrix`` through the ``bridge_core`` entry point
(``bridge_matrix.plugin``). See ``MatrixSettings`` for a profile's settings.

The names that need httpx (``MatrixProvider``, ``MatrixClient``) are imported on first use, so
loading the plugin to list providers or check a config imports no HTTP client.
``bridge_matrix.testing`` starts a throw-away Synapse for tests (``bridge-matrix[test]``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from bridge_matrix.error_codes import ERROR_CODES
from bridge_matrix.errors import map_error
from bridge_matrix.plugin import create_provider, provider_type
from bridge_matrix.settings import CAPABILITIES, MATRIX_BUDGET, MAX_LENGTH, MatrixSettings

if TYPE_CHECKING:
    from bridge_matrix.client import MatrixClient
    from bridge_matrix.provider import MatrixProvider

__all__ = [
    "CAPABILITIES",
    "ERROR_CODES",
    "MATRIX_BUDGET",
    "MAX_LENGTH",
    "MatrixClient",
    "MatrixProvider",
    "MatrixSettings",
    "create_provider",
    "map_error",
    "provider_type",
]

_SDK_NAMES = {
    "MatrixClient": "bridge_matrix.client",
    "MatrixProvider": "bridge_matrix.provider",
}


def __getattr__(name: str) -> Any:
    module = _SDK_NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'bridge_matrix' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
