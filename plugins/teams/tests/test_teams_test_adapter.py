"""The provider over botbuilder's own TestAdapter (the AdapterTransport seam): the activities
the SDK records are what the provider meant to send, with no HTTP at all."""

from __future__ import annotations

import pytest
from botbuilder.core.adapters import TestAdapter
from bridge_teams import AdapterTransport, TeamsProvider, TeamsSettings

from bridge_core import MessageRef

pytestmark = pytest.mark.anyio

CHANNEL = "19:adapter@thread.tacv2"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def make(adapter: TestAdapter) -> TeamsProvider:
    settings = TeamsSettings(
        app_id="app-1", app_password="secret-1", service_url="https://smba.example/teams/"
    )
    transport = AdapterTransport(adapter, bot_app_id="app-1")
    return TeamsProvider(settings, profile="adapter", transport=transport)


async def test_post_edit_and_thread_through_the_test_adapter() -> None:
    adapter = TestAdapter()
    provider = make(adapter)
    ref = await provider.post(CHANNEL, "hello from the adapter")
    assert ref == MessageRef(channel=CHANNEL, message_id=ref.message_id)
    (sent,) = adapter.activity_buffer
    assert sent.type == "message" and sent.text == "hello from the adapter"
    assert sent.conversation.id == CHANNEL
    assert sent.service_url == "https://smba.example/teams/"
    assert sent.from_property.id == "28:app-1"
    assert not sent.entities, "no mention entities"

    await provider.edit(ref, "edited")
    (updated,) = adapter.updated_activities
    assert (updated.id, updated.text, updated.conversation.id) == (
        ref.message_id,
        "edited",
        CHANNEL,
    )

    reply = await provider.post(CHANNEL, "in the chain", thread=ref.message_id)
    assert reply.thread == ref.message_id
    assert adapter.activity_buffer[-1].conversation.id == f"{CHANNEL};messageid={ref.message_id}"


async def test_escaped_text_reaches_the_adapter_unchanged() -> None:
    adapter = TestAdapter()
    provider = make(adapter)
    text = provider.escape("<at>General</at> @everyone done")
    await provider.post(CHANNEL, text)
    assert adapter.activity_buffer[0].text == text
    assert "<at>" not in text
