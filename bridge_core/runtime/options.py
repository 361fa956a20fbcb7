"""How a gateway is run, and the error it raises when it cannot start as configured.

``GatewayOptions`` holds what the command line or an embedding program decides (the config file
says what to serve); ``check_bind`` is the one check of them made before anything is built.

Exception hierarchy::

    GatewayError          the gateway cannot start as configured (message says how to fix it)
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from bridge_core.errors import BridgeError
from bridge_core.inbound import DEFAULT_INITIAL_BACKOFF
from bridge_core.ledger import LedgerWriter, Schedule

__all__ = ["GatewayError", "GatewayOptions", "check_bind"]


class GatewayError(BridgeError):
    """The gateway cannot start as configured."""


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: str | None) -> None:
    """Refuse to listen beyond loopback without a bearer token."""
    if token or _is_loopback(host):
        return
    raise GatewayError(
        f"refusing to listen on {host!r} without an API token: anyone who can reach this address "
        "could post events and messages to your channels. Set a token in the config "
        '([api] token = { env = "CHATBRIDGE_API_TOKEN" }) or listen on 127.0.0.1 only'
    )


@dataclass(frozen=True, slots=True)
class GatewayOptions:
    """How to run (the config says what to serve). ``None`` means the config's value."""

    host: str | None = None
    port: int | None = None
    http: bool = True
    grace: float = 10.0
    gateway_id: str | None = None
    settle: float = 1.0
    heartbeat: float = 1.0
    expiry: float | None = None
    lookback: float = 3600.0
    ledger_schedule: Schedule | None = None
    key_prefix: str = "bridge"
    default_agent: str | None = None  # for channels without an ``agent`` of their own
    public_url: str | None = None  # how platforms reach this gateway (handed to providers)
    # PostgreSQL owner lease; None: the membership's expiry, so a dead gateway's replies move
    # with its turns (ADR 0019)
    ledger_lease: float | None = None
    ledger_table_prefix: str = "bridge_"
    ledger_owner: str | None = None  # this process's owner id in the ledger (tests)
    # where a SQLite ledger's record, claim and settle statements run: a writer process of their
    # own, off the event loop's GIL, or the writer thread where none can start (ADR 0186, 0187)
    ledger_writer: LedgerWriter = "auto"
    reconnect_backoff: float = DEFAULT_INITIAL_BACKOFF  # first wait before rebuilding inbound

    @property
    def membership_expiry(self) -> float:
        """How long a silent gateway counts as a live member (``expiry``, else 3 heartbeats)."""
        return self.expiry if self.expiry is not None else 3.0 * self.heartbeat
