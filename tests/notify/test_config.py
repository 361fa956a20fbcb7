"""``NotifyConfig.for_channel``: a channel's configuration becomes its notifier's settings."""

from __future__ import annotations

from bridge_core.config import ChannelConfig, NotifySettings
from bridge_core.events import NOTIFYING_KINDS
from bridge_core.notify import NotifyConfig


def test_a_channels_timing_and_filters_are_taken_over() -> None:
    channel = ChannelConfig(
        profile="bot",
        channel_id="C1",
        kinds=["AgentSpawned", "AgentFinished"],
        workspaces=["w1", "w2"],
        notify=NotifySettings(hold=0.5, threshold=3, window=4.0),
    )
    config = NotifyConfig.for_channel(channel)
    assert config == NotifyConfig(
        hold=0.5,
        threshold=3,
        window=4.0,
        kinds=frozenset({"AgentSpawned", "AgentFinished"}),
        workspaces=frozenset({"w1", "w2"}),
    )


def test_unset_filters_mean_the_default_kinds_and_every_workspace() -> None:
    config = NotifyConfig.for_channel(ChannelConfig(profile="bot", channel_id="C1"))
    assert config.kinds == NOTIFYING_KINDS
    assert config.workspaces is None
    assert (config.hold, config.threshold, config.window) == (2.0, 5, 10.0)
