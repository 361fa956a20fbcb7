"""Reading Discord's answers (and discord.py's exceptions, at the gateway's login) as the core's
error taxonomy.

Discord answers errors with an HTTP status and a JSON body carrying a numeric ``code``; the code is
the more precise of the two, so it is read first and the status is the fallback::

    429 (Discord's or Cloudflare's), discord.RateLimited -> RateLimited(retry_after)
    10003 Unknown Channel, 10015 Unknown Webhook, 401 -> Unreachable
    10008 Unknown Message, 30046 too many edits to an old message -> NotFound
    50001 Missing Access, 50013 Missing Permissions, 50083 archived thread, 403 -> Forbidden
    50035 Invalid Form Body, 50006 empty message, 50109 invalid JSON, 40005 entity too large,
    other 400, 413, 422 -> MessageRejected (this body was refused; the channel is fine)
    other 4xx -> Unreachable (a request this bot can never make here)
    5xx, network errors, timeouts -> TransportError

30046 reads as ``NotFound`` on purpose: a live message that can no longer be edited is best
replaced by a new one, which is what the notifier and the ledger do with ``NotFound``.
Refusals of the body read as ``MessageRejected`` (ADR 0017): the notifier drops that rendering and
the ledger that reply, and the channel keeps serving every other message; before ADR 0017 they
read as ``Unreachable`` and one malformed message gave up the whole channel.

``map_error(status=, body=, headers=, where=)`` reads an answer (every REST call,
``bridge_discord.rest``) and has the shape of every shipped plugin's mapper and the template's.
``is_global_limit(body=, headers=)`` tells a 429 for the whole bot from one route's.
``map_exception(error, where=)`` reads discord.py's exceptions, which only the gateway's login
raises now that sends go through plain aiohttp (ADR 0066).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import aiohttp
import discord

from bridge_core import (
    Forbidden,
    MessageRejected,
    NotFound,
    ProviderError,
    RateLimited,
    TransportError,
    Unreachable,
    parse_retry_after,
    retry_after_header,
)
from bridge_discord.error_codes import ERROR_CODES

__all__ = ["is_global_limit", "map_error", "map_exception"]


_BODY_STATUSES = frozenset({400, 413, 422})
"""Statuses that refuse the request's body, read when the JSON ``code`` is not in the table."""


def is_global_limit(*, body: Any, headers: Mapping[str, Any] | None) -> bool:
    """Whether a 429 is Discord's global limit, which holds every request of the bot, not one
    route's: the body's ``"global": true``, ``X-RateLimit-Global: true`` or
    ``X-RateLimit-Scope: global`` (Discord documents all three; a proxy may keep only some)."""
    if isinstance(body, dict) and body.get("global") is True:
        return True
    for key, value in (headers or {}).items():
        if not (isinstance(key, str) and isinstance(value, str)):
            continue
        name, said = key.lower(), value.strip().lower()
        if (name, said) in (("x-ratelimit-global", "true"), ("x-ratelimit-scope", "global")):
            return True
    return False


def map_error(
    *, status: int, body: Any, headers: Mapping[str, Any] | None, where: str
) -> ProviderError:
    """The core error for Discord's answer ``status`` with JSON ``body`` (``None`` when it was not
    JSON) to the call ``where`` (``"post to channel 123"``)."""
    details = body if isinstance(body, dict) else {}
    raw_code = details.get("code")
    code = raw_code if isinstance(raw_code, int) and not isinstance(raw_code, bool) else 0
    detail = f"HTTP {status}, code {code}"
    if status == 429:
        # Discord's body says retry_after in seconds (a float); a Cloudflare block sends text
        # with only the header. The core's parser reads both and refuses garbage (ADR 0064).
        retry_after = parse_retry_after(details.get("retry_after"))
        if retry_after is None:
            retry_after = retry_after_header(headers)
        scope = "globally " if is_global_limit(body=body, headers=headers) else ""
        wait = f"retry after {retry_after:g} s" if retry_after is not None else "no retry-after"
        return RateLimited(f"Discord {scope}rate limited {where} ({wait})", retry_after=retry_after)
    if code in ERROR_CODES:
        kind, meaning = ERROR_CODES[code]
        return kind(f"Discord refused {where}: {meaning} ({detail})")
    if status == 401:
        return Unreachable(f"Discord refused {where}: bad bot token ({detail})")
    if status == 403:
        return Forbidden(f"Discord refused {where}: forbidden ({detail})")
    if status == 404:
        return NotFound(f"Discord refused {where}: not found ({detail})")
    if status >= 500:
        return TransportError(f"Discord failed {where} with a server error ({detail})")
    if status in _BODY_STATUSES:
        return MessageRejected(f"Discord refused the message in {where} ({detail})")
    return Unreachable(f"Discord refused {where} ({detail}); resending will not help")


def map_exception(error: BaseException, *, where: str) -> ProviderError:
    """The core error for a discord.py (or aiohttp) exception raised while doing ``where`` (the
    gateway's login; sends go through ``bridge_discord.rest``)."""
    if isinstance(error, discord.RateLimited):
        return RateLimited(
            f"Discord rate limited {where} for {error.retry_after:.2f} s",
            retry_after=parse_retry_after(error.retry_after),
        )
    if isinstance(error, discord.LoginFailure):
        return Unreachable(f"Discord refused the bot token during {where}: check the token setting")
    if isinstance(error, discord.HTTPException):
        response = getattr(error, "response", None)
        return map_error(
            status=error.status,
            body={"code": error.code},
            headers=getattr(response, "headers", None),
            where=where,
        )
    if isinstance(error, TimeoutError):
        return TransportError(f"Discord did not answer {where} in time")
    if isinstance(error, (OSError, aiohttp.ClientError, discord.GatewayNotFound)):
        return TransportError(f"network failure during {where}: {type(error).__name__}")
    return TransportError(f"unexpected failure during {where}: {type(error).__name__}")
