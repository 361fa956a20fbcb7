"""Reading a platform's failures as the core's errors: the provider kit's two tools for it.

``ErrorCodeTable`` is a plugin's table of its platform's documented error codes, each read as a
core error class with a line saying what it means. A provider type declares it
(``ProviderType(error_codes=...)``), so the documentation lists every platform's codes from the
provider registry, and the plugin's mapper looks codes up in it::

    ERROR_CODES = ErrorCodeTable(
        "Acme",
        {"not_in_channel": (Forbidden, "the bot was removed from the channel")},
    )
    error, meaning = ERROR_CODES["not_in_channel"]

``mapped_call`` awaits one call to the platform and raises whatever it failed with as a core
error, *outside* the ``except`` block: an SDK's exception often holds the request, and with it
the ``Authorization`` header, so it must not ride along as the new error's ``__context__`` (which
``raise ... from None`` only hides from the traceback; it is still there for any logger or error
reporter that walks it).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable, Iterator, Mapping
from typing import NamedTuple, TypeVar

from bridge_core.provider import ProviderError

__all__ = ["ErrorCode", "ErrorCodeTable", "mapped_call"]

CodeT = TypeVar("CodeT", bound=Hashable)
T = TypeVar("T")


class ErrorCode(NamedTuple):
    """How a provider reads one of its platform's error codes."""

    error: type[ProviderError]
    """The core error it is raised as (``Forbidden``, ``NotFound``, ...)."""
    meaning: str
    """What the code means, for the error's message and the documentation."""


class ErrorCodeTable(Mapping[CodeT, ErrorCode]):
    """A platform's error codes (Slack's ``"not_in_channel"``, Discord's ``50013``), each with the
    core error it reads as and what it means; a read-only mapping of code to ``ErrorCode``.

    ``platform`` names the platform in the documentation; ``source`` says, in a few words, where
    a code comes from in an answer (``"the error of {"ok": false}"``).
    """

    def __init__(
        self,
        platform: str,
        codes: Mapping[CodeT, tuple[type[ProviderError], str]],
        *,
        source: str = "",
    ) -> None:
        self.platform = platform
        self.source = source
        self._codes: dict[CodeT, ErrorCode] = {}
        for code, (error, meaning) in codes.items():
            if not (isinstance(error, type) and issubclass(error, ProviderError)):
                raise TypeError(f"{platform} error code {code!r}: {error!r} is not a ProviderError")
            self._codes[code] = ErrorCode(error, meaning)

    def __getitem__(self, code: CodeT) -> ErrorCode:
        return self._codes[code]

    def __iter__(self) -> Iterator[CodeT]:
        return iter(self._codes)

    def __len__(self) -> int:
        return len(self._codes)

    def __repr__(self) -> str:
        return f"ErrorCodeTable({self.platform!r}, {len(self)} codes)"


async def mapped_call(
    action: Callable[[], Awaitable[T]], read: Callable[[Exception], ProviderError | None]
) -> T:
    """Await ``action()``; if it raises, raise ``read(exception)`` instead, outside the ``except``
    block, so the platform's exception is neither the new error's ``__cause__`` nor its
    ``__context__``.

    A ``ProviderError`` the action raises itself (a refusal it read from an answer) passes
    unchanged, and so does any exception ``read`` returns ``None`` for (a bug, not the platform's
    failure). Cancellation is never caught.
    """
    failure: ProviderError | None
    try:
        return await action()
    except ProviderError:
        raise
    except Exception as exc:
        failure = read(exc)
        if failure is None:
            raise
    raise failure
