"""What ``chatbridge check`` verifies beyond the file: what ``run`` would refuse at start, and
(``--connect``) whether the stores answer and each channel's platform lets the bot post.

``start_problems`` is cheap and touches nothing: the agents import and are async callables, the
API does not listen beyond loopback without a token. ``probe_config`` connects: the PostgreSQL
ledger (``select 1``, nothing written), the SQLite ledger's folder (writable; the file is not
created), Redis (``PING``), and per channel the provider's own ``probe`` (a bot that cannot post
there is a failure; a provider that cannot tell without sending says so, and passes).
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from dataclasses import KW_ONLY, dataclass
from pathlib import Path

import anyio

from bridge_core.config import BridgeConfig
from bridge_core.ledger.kv import MemoryKeyValueStore
from bridge_core.runtime.agents import AgentLoadError, load_agent
from bridge_core.runtime.builders import make_provider
from bridge_core.runtime.logs import url_secrets
from bridge_core.runtime.options import GatewayError, check_bind

__all__ = ["PROBE_TIMEOUT", "Probe", "probe_config", "start_problems"]

PROBE_TIMEOUT = 10.0  # seconds for one store or platform to answer


@dataclass(frozen=True, slots=True)
class Probe:
    """One thing ``check --connect`` tried: what, whether it worked, and what it found."""

    what: str  # "ledger", "membership", "channel ops"
    _: KW_ONLY
    ok: bool
    detail: str

    def to_json(self) -> dict[str, object]:
        return {"what": self.what, "ok": self.ok, "detail": self.detail}


def start_problems(config: BridgeConfig) -> list[str]:
    """What ``chatbridge run`` would refuse at start with this config, one line each."""
    problems: list[str] = []
    for name, channel in config.channels.items():
        if channel.agent is None:
            continue
        try:
            load_agent(channel.agent)
        except AgentLoadError as exc:
            problems.append(f"channels.{name}.agent: {exc}")
    token = config.api.token.get_secret_value() if config.api.token is not None else None
    try:
        check_bind(config.api.host, token)
    except GatewayError as exc:
        problems.append(f"api.host: {exc}")
    return problems


def _shown(url: str) -> str:
    for secret in url_secrets(url):
        url = url.replace(secret, "***")
    return url


async def _postgres(url: str) -> str:
    import psycopg

    async with await psycopg.AsyncConnection.connect(
        url, connect_timeout=int(PROBE_TIMEOUT)
    ) as conn:
        await conn.execute("select 1")
    return f"PostgreSQL at {_shown(url)} answers"


def _sqlite_folder(path: Path) -> str:
    if path.exists():
        if not os.access(path, os.R_OK | os.W_OK):
            raise PermissionError(f"{path} exists but this user cannot read and write it")
        return f"SQLite file {path} exists and is writable"
    folder = path.parent
    if not folder.is_dir():
        raise FileNotFoundError(f"folder {folder} does not exist; create it, or change the path")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise PermissionError(
            f"folder {folder} is not writable by this user; {path} cannot be made"
        )
    return f"SQLite file {path} will be created (its folder is writable)"


async def _redis(url: str) -> str:
    from redis.asyncio import Redis

    client = Redis.from_url(url, socket_connect_timeout=int(PROBE_TIMEOUT))
    try:
        await client.ping()
    finally:
        await client.aclose()
    return f"Redis at {_shown(url)} answers"


async def _channel(config: BridgeConfig, name: str) -> str:
    channel = config.channels[name]
    profile = config.profiles[channel.profile]
    provider = make_provider(channel.profile, profile, kv=MemoryKeyValueStore(), public_url=None)
    where = f"{profile.provider} channel {channel.channel_id!r} (profile {channel.profile})"
    async with provider:
        can_post = await provider.probe(channel.channel_id)
    if can_post is False:
        raise PermissionError(
            f"{where}: the bot cannot post there (not a member, or no such channel)"
        )
    if can_post is None:
        return f"{where}: {profile.provider} cannot tell without sending; its first send will"
    return f"{where}: the bot can post"


async def _attempt(what: str, check: Callable[[], Awaitable[str]], *, secrets: list[str]) -> Probe:
    try:
        with anyio.fail_after(PROBE_TIMEOUT + 1):
            return Probe(what, ok=True, detail=await check())
    except TimeoutError:
        return Probe(what, ok=False, detail=f"no answer within {PROBE_TIMEOUT:g} s")
    except Exception as exc:  # every failure is a finding to report, not a crash of check
        message = str(exc) or type(exc).__name__
        for secret in secrets:  # a driver's error may quote the URL it was given
            message = message.replace(secret, "***")
        return Probe(what, ok=False, detail=message)


async def probe_config(config: BridgeConfig) -> list[Probe]:
    """Connect to each store and ask each channel's platform whether the bot can post there."""
    stores = config.stores
    checks: list[tuple[str, Callable[[], Awaitable[str]]]] = []
    if stores.delivery_ledger:
        ledger_url = stores.ledger_url
        if ledger_url is not None:
            checks.append(("ledger", lambda: _postgres(ledger_url)))
        elif stores.ledger_path is not None:
            path = stores.ledger_path

            async def sqlite() -> str:
                return _sqlite_folder(path)

            checks.append(("ledger", sqlite))
    membership = stores.membership_url
    if membership is not None:
        checks.append(("membership", lambda: _redis(membership)))
    for name in config.channels:

        def channel(name: str = name) -> Awaitable[str]:
            return _channel(config, name)

        checks.append((f"channel {name}", channel))
    secrets = url_secrets(stores.ledger) + url_secrets(stores.membership)
    return [await _attempt(what, check, secrets=secrets) for what, check in checks]
