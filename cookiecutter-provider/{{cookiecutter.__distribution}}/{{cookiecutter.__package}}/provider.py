"""The {{ cookiecutter.provider_name }} provider: one instance per bot profile.

bridge-core hands ``post`` text that is already escaped (by ``escape`` below) and chunked to
``MAX_LENGTH``; the provider sends it as given and classifies every failure. It never retries and
never sleeps on a rate limit: the core's per-channel sender paces and pauses, and the delivery
ledger counts every attempt.
"""

from __future__ import annotations

import re

from bridge_core import (
    ChatProvider,
    Forbidden,
    MessageRef,
    MessageRejected,
    NotFound,
    Unreachable,
    measure,
    neutralise_mass_mentions,
)

from {{ cookiecutter.__package }}.client import ApiClient
from {{ cookiecutter.__package }}.settings import (
{%- for name in ["CAPABILITIES", "DEFAULT_API_BASE", "LENGTH_UNIT", "MAX_LENGTH", cookiecutter.__env_prefix ~ "_BUDGET"] | sort(case_sensitive=True) %}
    {{ name }},
{%- endfor %}
    {{ cookiecutter.__class_prefix }}Settings,
)

__all__ = [
{%- for name in ["CAPABILITIES", "DEFAULT_API_BASE", "MAX_LENGTH", cookiecutter.__env_prefix ~ "_BUDGET"] | sort(case_sensitive=True) %}
    "{{ name }}",
{%- endfor %}
    "{{ cookiecutter.__class_prefix }}Provider",
    "{{ cookiecutter.__class_prefix }}Settings",
]

_MASS_TAGS = re.compile(r"<!(everyone|here|channel)", re.IGNORECASE)


class {{ cookiecutter.__class_prefix }}Provider(ChatProvider):
    """Posts and edits messages through the REST API."""

    name = "{{ cookiecutter.__provider }}"
    capabilities = CAPABILITIES

    def __init__(
        self,
        settings: {{ cookiecutter.__class_prefix }}Settings,
        *,
        profile: str,
        api_base_url: str | None = None,
    ) -> None:
        self._profile = profile
        self._client = ApiClient(
            base_url=api_base_url or settings.api_base_url,
            token=settings.token,
            timeout=settings.timeout,
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(profile={self._profile!r}, client={self._client!r})"

    def _check_length(self, text: str) -> None:
        size = measure(text, LENGTH_UNIT)
        if size > MAX_LENGTH:
            # The core chunks before posting, so this is a caller's bug; never truncate silently.
            # MessageRejected drops this one message; the channel carries on.
            raise MessageRejected(
                f"text is {size} {LENGTH_UNIT.value}, "
                f"over {{ cookiecutter.provider_name }}'s {MAX_LENGTH}: "
                "chunk it with bridge_core.text.prepare before posting"
            )

    async def post(self, channel: str, text: str, *, thread: str | None = None) -> MessageRef:
        self._check_length(text)
        try:
            message_id = await self._client.post_message(channel, text, thread=thread)
        except NotFound as exc:
            # A post has no message to lose: a 404 here means the channel itself is gone.
            raise Unreachable(str(exc)) from None
        return MessageRef(channel=channel, message_id=message_id, thread=thread)

    async def edit(self, ref: MessageRef, text: str) -> MessageRef:
        self._check_length(text)
        await self._client.edit_message(ref.channel, ref.message_id, text)
        return ref

    async def probe(self, channel: str) -> bool | None:
        try:
            return await self._client.can_post(channel)
        except (Forbidden, NotFound, Unreachable):
            return False

    def escape(self, text: str) -> str:
        # FILL IN: your platform's mention and markup syntax. Agent text must not be able to
        # ping a whole channel or break the message's markup.
        text = neutralise_mass_mentions(text)
        return _MASS_TAGS.sub(lambda match: "<\u200b!" + match.group(1), text)

    async def aclose(self) -> None:
        await self._client.aclose()
