from __future__ import annotations

from bridge_core.testing.clock import anyio_backend

__all__ = ["anyio_backend"]
