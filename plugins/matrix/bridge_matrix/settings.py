"""What the ``matrix`` provider type declares: its settings model, capabilities and budget.

Only pydantic and bridge-core are imported here, never httpx: the plugin module
(``bridge_matrix.plugin``) declares the provider type from this module alone, so listing
providers or checking a config costs no HTTP client import. ``bridge_matrix.provider``
re-exports these names.
"""

from __future__ import annotations

from pydantic import Field, SecretStr, field_validator

from bridge_core import Capabilities, LengthUnit, ProviderSettings, SendBudget, StreamingMode

__all__ = [
    "CAPABILITIES",
    "EVENT_BYTES",
    "MATRIX_BUDGET",
    "MAX_LENGTH",
    "MatrixSettings",
]

EVENT_BYTES = 65_536
"""Synapse refuses an event whose canonical JSON (envelope, hashes and signatures included) is
over 65,536 bytes (``M_TOO_LARGE``); the spec sets the same limit for every homeserver."""

MAX_LENGTH = 28_000
# Counted as sent (LengthUnit.JSON_UTF8: the text as a JSON string in UTF-8, "\x1b" 6 bytes,
# a quote or newline 2), so the core chunks any text to fit (ADR 0067). The event carries the
# text once as ``body`` (an edit: once in ``m.new_content`` plus a fallback of at most 100 bytes
# of text), so 28,000 stay under the 65,536-byte event with ample room for the envelope.
CAPABILITIES = Capabilities(
    edit=True,
    max_length=MAX_LENGTH,
    length_unit=LengthUnit.JSON_UTF8,
    threads=True,
    inbound=True,
    probe=True,
    streaming=StreamingMode.EDIT,  # a streamed reply is one event, replaced (m.replace) in place
)

# Synapse's documented default for sending events (rc_message: per_second 0.2, burst_count 10),
# less one burst token: the server measures its bucket at request arrival and ours at send, and
# the spare token absorbs that jitter, so a budget matched to the server sees no 429 (ADR 0082).
MATRIX_BUDGET = SendBudget(burst=9, per_second=0.2)


class MatrixSettings(ProviderSettings):
    """A Matrix bot profile's ``settings`` table."""

    # Each field's docstring is its description (ProviderSettings reads it): the configuration
    # reference shows it, and a missing key's error quotes its first sentence.

    homeserver_url: str
    """The bot account's homeserver, as clients reach it (``https://matrix.example.org``): the
    base of the client-server API, without ``/_matrix``."""
    user_id: str
    """The bot's full Matrix user id (``@bridge-bot:example.org``). Its own events coming back by
    ``/sync`` are dropped by this id."""
    access_token: SecretStr
    """The bot's access token (from a password login or the admin API); put it in config as
    ``{ env = "NAME" }``. It names one device, and Synapse keeps transaction ids per device, so
    keep one token per gateway identity."""
    device_id: str | None = None
    """The device the access token belongs to. Used only to key the stored ``/sync`` position;
    not set: the position is kept per user id."""
    call_deadline: float = Field(15.0, gt=0, le=120)
    """Seconds one post, edit or probe may take in all (connecting included). A call cut off
    fails as a transport error and the core's sender retries it later; a post resent that way
    reuses its transaction id, so the homeserver does not create it twice."""
    inbound: bool = False
    """Long-poll ``/sync`` and hand what people write in the bot's rooms to the channel's agent.
    Off for a bot that only posts."""
    sync_timeout: float = Field(30.0, ge=0, le=300)
    """Seconds the homeserver may hold one ``/sync`` long-poll open when nothing happens. Shorter
    notices a dead connection sooner; longer costs fewer requests."""

    @field_validator("homeserver_url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError(f"homeserver_url must start with http:// or https://, got {value!r}")
        return value.rstrip("/")

    @field_validator("user_id")
    @classmethod
    def _check_user_id(cls, value: str) -> str:
        if not value.startswith("@") or ":" not in value:
            raise ValueError(
                f"user_id must be a full Matrix id like @bot:example.org, got {value!r}"
            )
        return value
