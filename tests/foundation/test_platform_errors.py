"""The kit's tools for reading a platform's failures: ``ErrorCodeTable`` and ``mapped_call``."""

from __future__ import annotations

import pytest

from bridge_core import (
    ErrorCode,
    ErrorCodeTable,
    Forbidden,
    NotFound,
    ProviderError,
    mapped_call,
)
from bridge_core.plugins import create_plugin_manager


class _SdkError(Exception):
    """An SDK's exception holding the request, token and all."""

    def __init__(self) -> None:
        super().__init__("HTTP 403")
        self.request_headers = {"Authorization": "Bearer xoxb-secret"}


def _read(exc: Exception) -> ProviderError | None:
    return Forbidden(f"refused: {exc}") if isinstance(exc, _SdkError) else None


async def _failing() -> str:
    raise _SdkError


@pytest.mark.anyio
async def test_the_mapped_error_carries_nothing_of_the_sdks() -> None:
    with pytest.raises(Forbidden, match="refused: HTTP 403") as caught:
        await mapped_call(_failing, _read)
    assert caught.value.__cause__ is None
    assert caught.value.__context__ is None  # `raise ... from None` would leave it here


@pytest.mark.anyio
async def test_results_pass_and_so_do_the_actions_own_errors_and_unread_ones() -> None:
    async def answer() -> str:
        return "ok"

    async def refused() -> str:
        raise NotFound("read from the answer")

    async def bug() -> str:
        raise KeyError("a bug, not the platform")

    assert await mapped_call(answer, _read) == "ok"
    with pytest.raises(NotFound, match="read from the answer"):
        await mapped_call(refused, _read)
    with pytest.raises(KeyError):
        await mapped_call(bug, _read)


def test_an_error_code_table_reads_as_a_mapping_of_readings() -> None:
    table = ErrorCodeTable(
        "Acme", {"gone": (NotFound, "the message was deleted")}, source="the code of a body"
    )
    assert table["gone"] == ErrorCode(NotFound, "the message was deleted")
    error, meaning = table["gone"]
    assert (error, meaning) == (NotFound, "the message was deleted")
    assert "gone" in table and "other" not in table and len(table) == 1
    assert (table.platform, table.source) == ("Acme", "the code of a body")
    with pytest.raises(TypeError, match="is not a ProviderError"):
        ErrorCodeTable("Acme", {"bad": (ValueError, "not ours")})  # type: ignore[dict-item]


def test_every_shipped_plugin_declares_its_error_codes() -> None:
    # What the docs' platform tables read, through the registry, naming no plugin.
    registry = create_plugin_manager().providers
    tables = {name: registry[name].error_codes for name in ("slack", "discord", "teams", "matrix")}
    for name, table in tables.items():
        assert isinstance(table, ErrorCodeTable) and len(table) > 0, name
        assert all(issubclass(reading.error, ProviderError) for reading in table.values())
    assert tables["slack"]["not_in_channel"].error is Forbidden
    assert tables["discord"][10008].error is NotFound
    assert tables["matrix"]["M_FORBIDDEN"].error is Forbidden
