"""The plugin as bridge-core sees it once installed, and the provider against the fake API."""

from __future__ import annotations

from importlib.metadata import entry_points

import pytest
from bridge_core import MessageRef, ProviderContext, Unreachable
from bridge_core.plugins import create_plugin_manager
from bridge_core.testing.light_import import plugin_load_report
from fake_api import CHANNEL, TOKEN, FakeApi

import {{ cookiecutter.__package }}.plugin as plugin
from {{ cookiecutter.__package }} import (
    CAPABILITIES,
    {{ cookiecutter.__class_prefix }}Provider,
)


def test_the_entry_point_is_installed() -> None:
    found = {ep.name: ep.value for ep in entry_points(group="bridge_core")}
    module = found.get("{{ cookiecutter.__provider }}")
    assert module == "{{ cookiecutter.__package }}.plugin"


def test_bridge_core_lists_the_provider_with_its_distribution() -> None:
    registry = create_plugin_manager().providers
    entry = registry.get_entry("{{ cookiecutter.__provider }}")
    assert entry.distribution == "{{ cookiecutter.__distribution }}"
    assert entry.type.capabilities == CAPABILITIES


def test_loading_the_plugin_does_not_import_httpx() -> None:
    # bridge-core loads every installed plugin to list providers: declaring must stay cheap.
    distribution = "{{ cookiecutter.__distribution }}"
    provider = "{{ cookiecutter.__provider }}"
    report = plugin_load_report(distribution, provider, {"token": TOKEN})
    assert report.leaked_at_declare(["httpx"]) == []
    assert "httpx" in report.built  # the factory imports it, so the check above can fail


def build(fake: FakeApi) -> {{ cookiecutter.__class_prefix }}Provider:
    kind = plugin.provider_type()
    values = {"token": TOKEN, "api_base_url": fake.api_base, "timeout": 2.0}
    provider = kind.factory(kind.settings_model.model_validate(values), ProviderContext("test"))
    assert isinstance(provider, {{ cookiecutter.__class_prefix }}Provider)
    return provider


@pytest.mark.anyio
async def test_thread_replies_and_edits_reach_the_platform(fake_api: FakeApi) -> None:
    async with build(fake_api) as provider:
        root = await provider.post(CHANNEL, "root")
        reply = await provider.post(CHANNEL, "in the thread", thread=root.message_id)
        assert reply == MessageRef(CHANNEL, reply.message_id, thread=root.message_id)
        await provider.edit(reply, "edited in the thread")
    assert fake_api.last("post_message").json == {
        "text": "in the thread",
        "thread_id": root.message_id,
    }
    assert fake_api.texts(CHANNEL) == ["root", "edited in the thread"]


@pytest.mark.anyio
async def test_probe_tells_whether_the_bot_can_post(fake_api: FakeApi) -> None:
    fake_api.add_channel("C-private", member=False)
    async with build(fake_api) as provider:
        assert await provider.probe(CHANNEL) is True
        assert await provider.probe("C-private") is False
        assert await provider.probe("C-deleted") is False


@pytest.mark.anyio
async def test_posting_to_a_deleted_channel_is_unreachable(fake_api: FakeApi) -> None:
    async with build(fake_api) as provider:
        with pytest.raises(Unreachable, match="channel_not_found"):
            await provider.post("C-deleted", "hello")


def test_the_context_overrides_the_api_base_url(fake_api: FakeApi) -> None:
    kind = plugin.provider_type()
    settings = kind.settings_model.model_validate({"token": TOKEN})
    provider = kind.factory(settings, ProviderContext("test", api_base_url=fake_api.api_base))
    assert fake_api.api_base in repr(provider)
    assert TOKEN not in repr(provider)
