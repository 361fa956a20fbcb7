"""The notifier's settings: timing of holds and summaries, and the channel's filters.

``NotifyConfig.for_channel`` reads them from a channel's configuration as the config files give it
(``bridge_core.config.ChannelConfig``, ``chatbridge simulate``'s config); ``notify`` sees only
their shape (``ChannelNotifySettings``), so it never imports the config layer.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from bridge_core.events import NOTIFYING_KINDS

__all__ = ["ChannelNotifySettings", "NotifyConfig", "NotifyTiming"]


class NotifyTiming(Protocol):
    """A ``[notify]`` table's timing (``bridge_core.config.NotifySettings``)."""

    @property
    def hold(self) -> float: ...
    @property
    def threshold(self) -> int: ...
    @property
    def window(self) -> float: ...


class ChannelNotifySettings(Protocol):
    """What a channel's configuration says about its notifications."""

    @property
    def notify(self) -> NotifyTiming: ...
    @property
    def kinds(self) -> Iterable[str] | None: ...
    @property
    def workspaces(self) -> Iterable[str] | None: ...


@dataclass(frozen=True, slots=True)
class NotifyConfig:
    """How a channel's notifier behaves (seed ADR 0007's defaults).

    ``hold``: seconds a new agent's first post waits, so a lone agent can be told from a burst.
    ``threshold``: this many spawns in one workspace within the hold share one summary.
    ``window``: a spawn within this many seconds of a summary's latest member joins it.
    ``kinds``: event kinds that notify (default: spawned, status, finished, gone).
    ``workspaces``: only these workspaces notify (``None``: all).
    ``forget_after``: how long a finished agent's name is remembered, so late events about it
    (an ``AgentGone`` after ``AgentFinished``) do not open a new message.
    ``summary_names``: how many member names a summary lists before "and N more".
    """

    hold: float = 2.0
    threshold: int = 5
    window: float = 10.0
    kinds: frozenset[str] = field(default=NOTIFYING_KINDS)
    workspaces: frozenset[str] | None = None
    forget_after: float = 600.0
    summary_names: int = 20

    def __post_init__(self) -> None:
        if self.hold < 0:
            raise ValueError(f"NotifyConfig.hold must be >= 0 seconds, got {self.hold}")
        if self.threshold < 1:
            raise ValueError(f"NotifyConfig.threshold must be >= 1, got {self.threshold}")
        if self.window <= 0:
            raise ValueError(f"NotifyConfig.window must be > 0 seconds, got {self.window}")
        if self.forget_after <= 0:
            raise ValueError(f"NotifyConfig.forget_after must be > 0, got {self.forget_after}")
        object.__setattr__(self, "kinds", frozenset(self.kinds))
        if self.workspaces is not None:
            object.__setattr__(self, "workspaces", frozenset(self.workspaces))

    @classmethod
    def build(
        cls,
        *,
        hold: float = 2.0,
        threshold: int = 5,
        window: float = 10.0,
        kinds: Iterable[str] | None = None,
        workspaces: Iterable[str] | None = None,
    ) -> NotifyConfig:
        """From plain values (a channel's config): ``None`` kinds means the default kinds."""
        return cls(
            hold=hold,
            threshold=threshold,
            window=window,
            kinds=NOTIFYING_KINDS if kinds is None else frozenset(kinds),
            workspaces=None if workspaces is None else frozenset(workspaces),
        )

    @classmethod
    def for_channel(cls, channel: ChannelNotifySettings) -> NotifyConfig:
        """From a channel's configuration: its ``notify`` timing and its filters."""
        return cls.build(
            hold=channel.notify.hold,
            threshold=channel.notify.threshold,
            window=channel.notify.window,
            kinds=channel.kinds,
            workspaces=channel.workspaces,
        )
