"""Validating the Bot Framework's JWT on inbound activities, without blocking the event loop.

The Bot Connector signs every request to a bot's messaging endpoint with a JWT (RS256) whose keys
are published at an OpenID metadata URL. A token is accepted when its signature verifies with a
published key, its issuer is the Bot Framework's, its audience is our app id, it has not expired
(five minutes of clock skew allowed, as the Bot Framework does), the key is endorsed for the
activity's channel, and its ``serviceurl`` claim is present and names the service URL the
activity asks us to answer on (so a stolen token cannot redirect our replies): a token without
the claim, or an activity without a ``serviceUrl``, is refused, as the Bot Connector's rules say.

Keys are fetched with aiohttp and cached; an unknown key id triggers at most one refresh per
``min_refresh`` seconds. Signature checks are pure CPU and quick. Tests inject keys with
``StaticKeys`` or serve them from a fake.

Exception hierarchy::

    InvalidToken        the request must be refused with 401 (``reason`` says why)
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp
import anyio
import jwt

from bridge_teams.settings import BOT_FRAMEWORK_OPENID_URL

__all__ = [
    "BOT_FRAMEWORK_ISSUER",
    "BOT_FRAMEWORK_OPENID_URL",
    "InvalidToken",
    "KeySource",
    "OpenIdKeys",
    "SigningKey",
    "StaticKeys",
    "TokenValidator",
]

BOT_FRAMEWORK_ISSUER = "https://api.botframework.com"
CLOCK_SKEW = 300.0
_HEADERS_KEPT = 64  # distinct token headers remembered (the connector uses a handful of keys)


class InvalidToken(Exception):
    """The inbound request's token is missing or not acceptable."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class SigningKey:
    key: Any  # a cryptography public key, as PyJWT wants it
    endorsements: tuple[str, ...] = ()


def _parse_jwks(jwks: Mapping[str, Any]) -> dict[str, SigningKey]:
    keys: dict[str, SigningKey] = {}
    for entry in jwks.get("keys", []):
        kid = entry.get("kid")
        if not kid:
            continue
        parsed = jwt.PyJWK(dict(entry), algorithm="RS256")
        keys[str(kid)] = SigningKey(parsed.key, tuple(entry.get("endorsements", ())))
    return keys


class KeySource(Protocol):
    async def key(self, kid: str) -> SigningKey | None: ...


class StaticKeys:
    """Keys given up front (a JWKS document): for tests and air-gapped setups."""

    def __init__(self, jwks: Mapping[str, Any]) -> None:
        self._keys = _parse_jwks(jwks)

    async def key(self, kid: str) -> SigningKey | None:
        return self._keys.get(kid)


class OpenIdKeys:
    """Keys from an OpenID metadata document's ``jwks_uri``, cached, refreshed when stale
    (``max_age``) or when an unknown key id shows up (at most once per ``min_refresh``)."""

    def __init__(
        self,
        metadata_url: str = BOT_FRAMEWORK_OPENID_URL,
        *,
        max_age: float = 24 * 3600.0,
        min_refresh: float = 60.0,
        timeout: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._metadata_url = metadata_url
        self._max_age = max_age
        self._min_refresh = min_refresh
        self._timeout = timeout
        self._clock = clock
        self._keys: dict[str, SigningKey] = {}
        self._fetched_at: float | None = None
        self._lock = anyio.Lock()

    def __repr__(self) -> str:
        return f"OpenIdKeys({self._metadata_url!r})"

    async def key(self, kid: str) -> SigningKey | None:
        if self._needs_refresh(kid):
            async with self._lock:
                if self._needs_refresh(kid):  # another request may have just refreshed
                    await self._refresh()
        return self._keys.get(kid)

    def _needs_refresh(self, kid: str) -> bool:
        if self._fetched_at is None:
            return True
        age = self._clock() - self._fetched_at
        return age > self._max_age or (kid not in self._keys and age > self._min_refresh)

    async def _refresh(self) -> None:
        timeout = aiohttp.ClientTimeout(total=self._timeout)
        try:
            async with aiohttp.ClientSession(timeout=timeout) as session:
                async with session.get(self._metadata_url) as response:
                    response.raise_for_status()
                    metadata = json.loads(await response.text())
                async with session.get(metadata["jwks_uri"]) as response:
                    response.raise_for_status()
                    jwks = json.loads(await response.text())
        except (aiohttp.ClientError, TimeoutError, ValueError, KeyError) as exc:
            if self._keys:
                # Keep serving the keys we have (the platform rotates slowly); try again after
                # min_refresh rather than on every request.
                self._fetched_at = self._clock() - self._max_age + self._min_refresh
                return
            raise InvalidToken(
                f"cannot fetch signing keys from {self._metadata_url}: {type(exc).__name__}"
            ) from None
        self._keys = _parse_jwks(jwks)
        self._fetched_at = self._clock()


class TokenValidator:
    """Checks the ``Authorization`` header of a request from the Bot Connector."""

    def __init__(
        self,
        *,
        app_id: str,
        keys: KeySource,
        issuers: Sequence[str] = (BOT_FRAMEWORK_ISSUER,),
        clock_skew: float = CLOCK_SKEW,
    ) -> None:
        self._app_id = app_id
        self._keys = keys
        self._issuers = list(issuers)
        self._clock_skew = clock_skew
        self._headers: dict[str, tuple[object, str]] = {}  # header segment -> (alg, kid)

    def __repr__(self) -> str:
        return f"TokenValidator(app_id={self._app_id!r}, issuers={self._issuers!r})"

    def _header(self, token: str) -> tuple[object, str]:
        """The token's ``alg`` and ``kid``, unverified: they only pick the key, and
        ``jwt.decode`` checks the whole token (its header included) after.

        Read once per distinct header: the Bot Connector signs with a few keys and reuses a
        token for many requests, and reading a header took PyJWT as long as half a decode (it
        decodes and checks every segment, the signature's too). A header that does not read
        is not remembered.
        """
        segment = token.partition(".")[0]
        known = self._headers.get(segment)
        if known is not None:
            return known
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError:
            raise InvalidToken("malformed token") from None
        read = (header.get("alg"), str(header.get("kid", "")))
        if len(self._headers) >= _HEADERS_KEPT:
            self._headers.clear()  # only forged or rotated headers get here; start afresh
        self._headers[segment] = read
        return read

    async def validate(
        self, authorization: str | None, *, channel_id: str | None, service_url: str | None
    ) -> dict[str, Any]:
        """The token's claims; ``InvalidToken`` when the request must be refused."""
        if not authorization or not authorization.startswith("Bearer "):
            raise InvalidToken("missing bearer token")
        token = authorization[len("Bearer ") :].strip()
        alg, kid = self._header(token)
        if alg != "RS256":
            raise InvalidToken(f"unexpected signing algorithm {alg!r}")
        signing = await self._keys.key(kid)
        if signing is None:
            raise InvalidToken("token signed with an unknown key")
        if channel_id and signing.endorsements and channel_id not in signing.endorsements:
            raise InvalidToken(f"signing key is not endorsed for channel {channel_id!r}")
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                signing.key,
                algorithms=["RS256"],
                audience=self._app_id,
                issuer=self._issuers,
                leeway=self._clock_skew,
                options={"require": ["exp", "iss", "aud"]},
            )
        except jwt.ExpiredSignatureError:
            raise InvalidToken("token expired") from None
        except jwt.InvalidAudienceError:
            raise InvalidToken("token is for another app") from None
        except jwt.InvalidIssuerError:
            raise InvalidToken("token from an unexpected issuer") from None
        except jwt.InvalidTokenError as exc:
            raise InvalidToken(f"token rejected: {type(exc).__name__}") from None
        # The Bot Connector's rule: the claim must be there and name the activity's serviceUrl,
        # else a token lifted from one request could send our replies anywhere.
        claimed = claims.get("serviceurl")
        if not isinstance(claimed, str) or not claimed:
            raise InvalidToken("token has no serviceurl claim")
        if not service_url or claimed.rstrip("/") != service_url.rstrip("/"):
            raise InvalidToken("token's serviceurl does not match the activity's serviceUrl")
        return claims
