"""What the ``slack`` provider type declares: its settings model and capabilities.

Only pydantic and bridge-core are imported here, never slack-sdk or aiohttp: the plugin module
(``bridge_slack.plugin``) declares the provider type from this module alone, so listing
providers or checking a config costs no SDK import. ``bridge_slack.provider`` re-exports these
names.
"""

from __future__ import annotations

import re

from pydantic import Field, SecretStr, field_validator, model_validator

from bridge_core import Capabilities, LengthUnit, ProviderSettings, SendBudget, StreamingMode

__all__ = [
    "CAPABILITIES",
    "DEFAULT_API_BASE",
    "MAX_LENGTH",
    "SLACK_BUDGET",
    "SlackSettings",
]

DEFAULT_API_BASE = "https://slack.com/api/"

# Slack refuses text over 40,000 characters but collapses anything past about 4,000 behind
# "Show more" and recommends staying under 4,000; 3,900 keeps each chunk one readable message
# with room for the escapes' growth measured in already (ADR 0041).
MAX_LENGTH = 3_900

CAPABILITIES = Capabilities(
    edit=True,
    max_length=MAX_LENGTH,
    length_unit=LengthUnit.CHARACTERS,
    threads=True,
    inbound=True,
    probe=True,
    # chat.startStream / appendStream / stopStream, each paced by the core's sender (ADR 0091)
    streaming=StreamingMode.NATIVE,
)

# ADR 0007's Slack preset: chat.postMessage allows about one message a second per channel, with
# short bursts; 3 back to back, then one a second, and never more than 3,600 in any hour.
SLACK_BUDGET = SendBudget.hourly(burst=3, per_hour=3600)


class SlackSettings(ProviderSettings):
    """A Slack profile's ``settings`` table.

    ``bot_token`` (``xoxb-…``) is required. Inbound takes either the Events API over HTTP
    (``signing_secret`` set, served at ``events_path``) or Socket Mode (``socket_mode = true``
    with an app-level ``app_token``, ``xapp-…``). ``api_base_url`` points the client elsewhere
    (GovSlack's ``https://slack-gov.com/api/``, a proxy, a test's fake).
    """

    # Each field's docstring is its description (ProviderSettings reads it): the configuration
    # reference shows it, and a missing key's error quotes its first sentence.

    bot_token: SecretStr
    """The Bot User OAuth Token (``xoxb-…``) that posts, edits and probes. It needs the
    ``chat:write`` scope; with ``channels:read`` too, the sender's re-check after a refusal can tell
    an archived channel from a lost permission."""
    signing_secret: SecretStr | None = None
    """The app's signing secret; setting it serves the Events API at ``events_path``, where only
    requests with a valid signature under five minutes old are accepted. Leave it out for a bot that
    only posts, or that takes events over Socket Mode."""
    api_base_url: str = DEFAULT_API_BASE
    """The base URL of Slack's Web API. Change it for GovSlack (``https://slack-gov.com/api/``), an
    egress proxy or a test's fake; a missing trailing slash is added."""
    events_path: str = "/slack/events"
    """The path, on the gateway's HTTP API, where the Events API delivers; the app's Request URL is
    the gateway's public address plus this path. Give each Slack profile with inbound a path of its
    own."""
    timeout: float = Field(default=10.0, gt=0, le=120)
    """Seconds one Web API call may take before it fails as a transport error, which is retried
    later (the sender backs off), and a new Socket Mode connection has to send its ``hello``. Raise
    it on a slow link or behind a slow proxy."""
    bot_user_id: str | None = None
    """The bot's own user id (``U…``), so that its own messages coming back as events are never
    taken for people's. Optional: without it the id is asked of ``auth.test`` once, before the first
    inbound event is read; set it to skip that call."""
    unfurl: bool = False
    """Let Slack unfurl links and media in the bridge's posts. Off: notifications and replies post
    without link previews."""
    socket_mode: bool = False
    """Take inbound events over a Socket Mode websocket instead of the Events API over HTTP; it
    needs ``app_token``. Use it when Slack cannot reach the gateway; ``signing_secret`` and
    ``events_path`` then go unused."""
    app_token: SecretStr | None = None
    """The app-level token (``xapp-…``, scope ``connections:write``) that opens Socket Mode
    connections; required by, and only used with, ``socket_mode = true``."""
    backfill: bool = True
    """Read back what people wrote while inbound was down longer than Slack retries an event
    (about five minutes: a deploy, an outage): for each channel a person wrote in, the messages
    after the last one delivered, at most 1,000 per channel, when inbound starts again. It needs
    the ``channels:history`` scope (and ``groups:``, ``im:``, ``mpim:history`` for private
    channels and direct messages) and the core's key-value store (kept beside the ledger). Replies
    in threads are not read back. Off, such a message is never seen."""
    socket_ping_interval: float = Field(default=10.0, gt=0, le=300)
    """Seconds between pings on the Socket Mode websocket; no answer within half of it counts as a
    lost connection, which the core reconnects. Lower it to notice a dead connection sooner."""

    @field_validator("bot_token")
    @classmethod
    def _token_shape(cls, value: SecretStr) -> SecretStr:
        token = value.get_secret_value()
        if not token.strip():
            raise ValueError("bot_token is empty: set it to the app's Bot User OAuth Token")
        if not token.startswith("xox"):
            # Never echo the value: it may be a real secret pasted into the wrong key.
            raise ValueError("bot_token must be a Slack token (starting xoxb-)")
        return value

    @field_validator("signing_secret")
    @classmethod
    def _secret_present(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not value.get_secret_value().strip():
            raise ValueError("signing_secret is empty: set it or remove the key")
        return value

    @field_validator("app_token")
    @classmethod
    def _app_token_shape(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not value.get_secret_value().startswith("xapp-"):
            raise ValueError("app_token must be an app-level token (starting xapp-)")
        return value

    @model_validator(mode="after")
    def _socket_mode_needs_app_token(self) -> SlackSettings:
        if self.socket_mode and self.app_token is None:
            raise ValueError(
                "socket_mode = true needs app_token: an app-level token (xapp-…) with the "
                "connections:write scope"
            )
        return self

    @field_validator("api_base_url")
    @classmethod
    def _base_url(cls, value: str) -> str:
        if not re.match(r"^https?://[^/\s]+", value):
            raise ValueError("api_base_url must be an http(s) URL such as https://slack.com/api/")
        return value if value.endswith("/") else value + "/"

    @field_validator("events_path")
    @classmethod
    def _path(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError("events_path must start with /")
        return value
