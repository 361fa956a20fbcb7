"""What the ``teams`` provider type declares: its settings model and capabilities.

Only pydantic and bridge-core are imported here, never botbuilder, msrest, requests, aiohttp or
PyJWT: the plugin module (``bridge_teams.plugin``) declares the provider type from this module
alone, so listing providers or checking a config costs no SDK import. ``bridge_teams.provider``
re-exports these names; ``bridge_teams.auth`` and ``bridge_teams.transport`` re-export the
defaults they use.
"""

from __future__ import annotations

from pydantic import Field, SecretStr

from bridge_core import (
    Capabilities,
    LengthUnit,
    ProviderSettings,
    SendBudget,
    StreamingMode,
    Window,
)

__all__ = [
    "BOT_FRAMEWORK_OPENID_URL",
    "CAPABILITIES",
    "DEFAULT_SCOPE",
    "MAX_LENGTH",
    "TEAMS_BUDGET",
    "TeamsSettings",
]

BOT_FRAMEWORK_OPENID_URL = "https://login.botframework.com/v1/.well-known/openidconfiguration"
DEFAULT_SCOPE = "https://api.botframework.com/.default"

# Teams caps a message's whole payload near 28 KB. msrest serialises with JSON's ASCII escapes, so
# the text is measured as it goes on the wire (LengthUnit.JSON_ASCII: "\x1b" is the 6 bytes
# \u001b, an emoji the 12 of a surrogate pair): 24,000 such bytes of text leave the envelope more
# than 4 KB under the cap, whatever the text holds (ADR 0067, amending ADR 0046's 8,000 UTF-8
# bytes, which control characters grew sixfold past the cap).
MAX_LENGTH = 24_000
CAPABILITIES = Capabilities(
    edit=True,
    max_length=MAX_LENGTH,
    length_unit=LengthUnit.JSON_ASCII,
    threads=True,
    inbound=True,
    probe=False,
    streaming=StreamingMode.EDIT,  # a streamed reply is one message, edited in place
)

# ADR 0007's Teams preset with the documented per-conversation windows (PLATFORMS.md): 7 a
# second, 8 in 2 s, 60 in 30 s, 1,800 an hour. A token bucket alone (7 + 0.5/s) would admit 1,807
# in an hour; the windows bound that exactly.
TEAMS_BUDGET = SendBudget.hourly(
    burst=7, per_hour=1800, extra=(Window(7, 1.0), Window(8, 2.0), Window(60, 30.0))
)


class TeamsSettings(ProviderSettings):
    """A Teams bot profile's ``settings`` table."""

    # Each field's docstring is its description (ProviderSettings reads it): the configuration
    # reference shows it, and a missing key's error quotes its first sentence.

    app_id: str
    """The bot's Microsoft app id (the GUID of its Azure Bot registration); inbound tokens must be
    issued for it."""
    app_password: SecretStr
    """The app's client secret, exchanged at ``token_url`` for Bot Connector tokens."""
    tenant_id: str | None = None
    """The tenant of a single-tenant bot: it picks the default token endpoint and goes into
    conversation references built from ``service_url``. Leave it out for a multi-tenant bot."""
    service_url: str | None = None
    """The Bot Connector URL for channels no inbound activity has introduced yet
    (``https://smba.trafficmanager.net/teams/``), so the bot can post there first. Not set: the bot
    posts to a channel only once it has been installed or messaged there (the reference it learns is
    kept in the ledger's store)."""
    token_url: str | None = None
    """The OAuth endpoint for the client-credentials grant. Not set:
    ``https://login.microsoftonline.com/<tenant_id or botframework.com>/oauth2/v2.0/token``. Change
    it for a sovereign cloud or a test's fake."""
    oauth_scope: str = DEFAULT_SCOPE
    """The scope requested for Bot Connector tokens. Change it only for a sovereign cloud whose Bot
    Framework has its own."""
    openid_metadata_url: str = BOT_FRAMEWORK_OPENID_URL
    """Where the keys that sign inbound Bot Framework tokens are published (OpenID metadata). Change
    it only for a sovereign cloud or a test's fake."""
    messaging_path: str = "/api/teams/messages"
    """The path, on the gateway's HTTP API, of the bot's messaging endpoint; the Azure Bot's
    messaging endpoint is the gateway's public address plus this path. Give each Teams profile a
    path of its own."""
    call_deadline: float = Field(15.0, gt=0, le=120)
    """Seconds one post or edit may take in all: fetching a connector token when one is due, the
    request to the Bot Connector, and the one resend after it refuses a cached token. A call not
    done by then fails as a transport error and the core's sender retries it later (as with
    Discord's ``call_deadline``). Each connection attempt and each wait on an answer is held to it
    too, so the worker thread of a call given up on ends soon after."""
    insecure_skip_token_validation: bool = False
    """Accept inbound requests without checking their Bot Framework token, so anyone who can reach
    ``messaging_path`` can write as anyone. For local development (the Bot Framework Emulator) only;
    the provider logs a warning while it is on."""
