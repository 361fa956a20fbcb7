"""Which exceptions a sender contains to one piece of work, and which it lets through.

A channel's sender runs for the gateway's lifetime; an exception that escaped it would end the
channel and, through the gateway's task group, the gateway. So whatever a renderer, a provider
call, a ``begin`` or an outcome callback raises is contained to that piece of work (ADR 0026),
except what asks the process itself to stop: cancellation (the task group is shutting the
sender down), ``KeyboardInterrupt``, ``SystemExit`` and ``GeneratorExit``, and an exception group
that holds any of them. Those are never swallowed: they are how a shutdown reaches the sender.

Any other ``BaseException`` subclass (a plugin's ``class Abort(BaseException)``, a test
framework's outcome raised in the wrong place) is a bug in that piece of work, not a request to
stop, and is contained like an ``Exception``.
"""

from __future__ import annotations

import logging

import anyio

from bridge_core.provider import ProviderError, TransportError

__all__ = ["fresh_error", "must_propagate", "provider_bug"]

logger = logging.getLogger("bridge_core.sending")

_PROCESS_STOPS: tuple[type[BaseException], ...] = (KeyboardInterrupt, SystemExit, GeneratorExit)


def must_propagate(error: BaseException) -> bool:
    """True for cancellation and the process being told to stop (or a group holding either)."""
    if isinstance(error, Exception):
        return False  # an ExceptionGroup is an Exception: it holds only Exceptions
    if isinstance(error, BaseExceptionGroup):
        return any(must_propagate(inner) for inner in error.exceptions)
    return isinstance(error, (anyio.get_cancelled_exc_class(), *_PROCESS_STOPS))


def fresh_error(error: ProviderError) -> ProviderError:
    """A new instance for each waiter: one exception raised in many tasks tangles tracebacks."""
    try:
        return type(error)(*error.args)
    except TypeError:  # a subclass with another signature: share the instance after all
        return error


def provider_bug(
    error: BaseException, *, provider: str, channel: str, key: object
) -> TransportError:
    """What a provider call that raised a non-``ProviderError`` reads as: a transport error (as
    ``reading_for`` reads anything unclassified), logged with the channel and the work's key."""
    logger.error(
        "provider %r raised a non-ProviderError on channel %r (work %r)",
        provider,
        channel,
        key,
        exc_info=error,
    )
    return TransportError(f"{type(error).__name__}: {error}")
