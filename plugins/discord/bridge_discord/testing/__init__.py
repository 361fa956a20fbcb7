"""Test helpers for the Discord provider, reusable by anyone testing against Discord's APIs.

``FakeDiscord`` serves Discord's REST API and a gateway websocket over real local HTTP, built on
the core's ``bridge_core.testing.FakePlatform``; start it with the core kit's ``start_fake``
fixture (``fake = start_fake(FakeDiscord(token=...))``) or as a context manager.

Importing this package imports aiohttp (the fake's server), never discord.py.
"""

from __future__ import annotations

from bridge_discord.testing.fake_discord import DISCORD_EPOCH_MS, FakeDiscord, FakeDiscordChannel

__all__ = ["DISCORD_EPOCH_MS", "FakeDiscord", "FakeDiscordChannel"]
