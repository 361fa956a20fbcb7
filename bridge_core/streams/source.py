"""What an agent may hand back: a text, or a stream of text deltas.

An in-process agent returns ``str`` (the whole reply), an async iterator of ``str`` deltas (an
async generator works), or an object with a ``stream()`` method returning one (an LLM client's
response object, for instance; ``stream()`` may also be a coroutine returning the iterator).
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator
from typing import Any

__all__ = ["StreamTypeError", "deltas_of"]


class StreamTypeError(TypeError):
    """An agent handed back something that is neither text nor a stream of text."""


async def deltas_of(result: Any) -> str | AsyncIterator[str]:
    """``result`` as the whole text, or as an async iterator of deltas."""
    if isinstance(result, str):
        return result
    stream = getattr(result, "stream", None)
    if callable(stream) and not hasattr(result, "__aiter__"):
        result = stream()
        if inspect.isawaitable(result):
            result = await result
    if hasattr(result, "__aiter__"):
        return _checked(result.__aiter__())
    raise StreamTypeError(
        f"the agent returned {type(result).__name__}, which is neither a str nor an async "
        "iterator of str deltas (nor an object with a stream() method returning one)"
    )


async def _checked(iterator: AsyncIterator[Any]) -> AsyncIterator[str]:
    try:
        async for delta in iterator:
            if not isinstance(delta, str):
                raise StreamTypeError(
                    f"the agent's stream yielded {type(delta).__name__} {delta!r:.60}; each "
                    "delta must be a str"
                )
            yield delta
    finally:
        # the agent's generator is closed however the stream ends (its finally blocks run)
        aclose = getattr(iterator, "aclose", None)
        if aclose is not None:
            await aclose()
