"""What the ``teams`` provider type declares: its settings model and capabilities.

Only pydantic and bridge-core are imported here, never botbuilder, msrest, requests, aiohttp or
PyJWT: the plugin module (``bridge_teams.plugin``) declares the provider type from this module
alone, so listing providers or checking a config costs no SDK import. ``bridge_teams.provider``
re-exports these names; ``bridge_teams.auth`` and ``bridge_teams.transport`` re-export the
defaults they use.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from bridge_core import Capabilities, LengthUnit

__all__ = [
    "BOT_FRAMEWORK_OPENID_URL",
    "CAPABILITIES",
    "DEFAULT_SCOPE",
    "MAX_TEXT_BYTES",
    "TeamsSettings",
]

BOT_FRAMEWORK_OPENID_URL = "https://login.botframework.com/v1/.well-known/openidconfiguration"
DEFAULT_SCOPE = "https://api.botframework.com/.default"

# Teams caps a message's whole payload near 28 KB. msrest serialises with JSON's ASCII escapes, so
# text can grow up to threefold on the wire (an emoji's 4 UTF-8 bytes become a 12-byte surrogate
# escape pair); 8,000 UTF-8 bytes of text stay under the cap with room for the envelope (ADR 0046).
MAX_TEXT_BYTES = 8000
CAPABILITIES = Capabilities(
    edit=True,
    max_length=MAX_TEXT_BYTES,
    length_unit=LengthUnit.BYTES,
    threads=True,
    inbound=True,
    probe=False,
)


class TeamsSettings(BaseModel):
    """A Teams bot profile's ``settings`` table."""

    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)

    app_id: str = Field(description="The bot's Microsoft app id.")
    app_password: SecretStr = Field(description="The app's client secret (an env reference).")
    tenant_id: str | None = Field(None, description="Tenant of a single-tenant bot.")
    service_url: str | None = Field(
        None,
        description="Bot Connector service URL for channels no inbound activity has introduced "
        "yet (e.g. https://smba.trafficmanager.net/teams/); the API base for tests and proxies.",
    )
    token_url: str | None = Field(
        None, description="OAuth token endpoint; default: login.microsoftonline.com for the tenant."
    )
    oauth_scope: str = Field(DEFAULT_SCOPE, description="Scope of the connector token.")
    openid_metadata_url: str = Field(
        BOT_FRAMEWORK_OPENID_URL, description="Where inbound tokens' signing keys are published."
    )
    messaging_path: str = Field("/api/teams/messages", description="The messaging endpoint path.")
    call_deadline: float = Field(15.0, gt=0, le=120, description="Timeout of one connector call.")
    insecure_skip_token_validation: bool = Field(
        False,
        description="Accept inbound requests without checking their JWT. Local development only.",
    )
