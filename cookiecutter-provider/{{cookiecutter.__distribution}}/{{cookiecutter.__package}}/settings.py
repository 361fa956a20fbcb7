"""The provider type's declaration: limits, capabilities, budget and settings model.

Keep this module light (pydantic and bridge-core only, never httpx or your platform's SDK): the
plugin module declares the provider type from it, and bridge-core loads every installed plugin
to list providers or check a config, so whatever this imports every ``chatbridge`` command pays
for. ``provider`` re-exports these names.
"""

from __future__ import annotations

from bridge_core import Capabilities, LengthUnit, ProviderSettings, SendBudget, StreamingMode
from pydantic import Field, SecretStr

__all__ = [
{%- for name in ["CAPABILITIES", "DEFAULT_API_BASE", "LENGTH_UNIT", "MAX_LENGTH", cookiecutter.__env_prefix ~ "_BUDGET"] | sort(case_sensitive=True) %}
    "{{ name }}",
{%- endfor %}
    "{{ cookiecutter.__class_prefix }}Settings",
]

# FILL IN: your platform's documented limits.
DEFAULT_API_BASE = "https://api.example.com/v1"
MAX_LENGTH = 4000  # the longest message the platform accepts, counted in LENGTH_UNIT
# What the platform counts: CHARACTERS (code points), UTF16 (JavaScript string length), BYTES
# (UTF-8), or JSON_ASCII (the text as JSON with ASCII escapes, when the cap is on the body sent:
# "\x1b" counts 6). The conformance suite posts awkward text at the maximum to check it.
LENGTH_UNIT = LengthUnit.CHARACTERS

CAPABILITIES = Capabilities(
    edit=True,  # the platform lets a bot edit its own messages
    max_length=MAX_LENGTH,
    length_unit=LENGTH_UNIT,
    threads=True,  # messages can be posted into a thread
    inbound=False,  # this template sends only; see the README to add inbound
    probe=True,  # can_post() tells cheaply whether the bot may still post to a channel
    streaming=StreamingMode.EDIT,  # a streamed reply: one message edited in place (or NONE)
)

# A token bucket of 3 with 1 send a second, and at most 3,600 in any hour. Set it from the
# platform's documented rate limits; a profile can override it in bridge.toml.
{{ cookiecutter.__env_prefix }}_BUDGET = SendBudget.hourly(burst=3, per_hour=3600)


class {{ cookiecutter.__class_prefix }}Settings(ProviderSettings):
    """A {{ cookiecutter.provider_name }} profile's ``settings`` table in bridge.toml."""

    # Each field's docstring is its description (ProviderSettings reads it): bridge-core's
    # configuration reference shows it, and a missing key's error quotes its first sentence, so
    # say what the setting does, its unit, and when to change it.

    token: SecretStr
    """The bot token, sent as ``Authorization: Bearer …`` on every API call."""
    api_base_url: str = DEFAULT_API_BASE
    """The base URL of the platform's REST API. Change it only for a proxy or a test's fake."""
    timeout: float = Field(10.0, gt=0, le=120)
    """Seconds one API call may take before it fails as a transport error, which the core's
    sender backs off from and retries. Raise it on a slow link."""
