"""The notifier (seed ADR 0007): live messages per agent, burst summaries, rendering.

Imports only the vocabulary; submits to anything with ``SenderLike``'s interface (in practice
``bridge_core.sending.ChannelSender``).
"""

from bridge_core.notify.config import NotifyConfig
from bridge_core.notify.notifier import Notifier, NotifierStatistics
from bridge_core.notify.protocol import SenderLike
from bridge_core.notify.render import (
    AgentState,
    SummaryCounts,
    defuse,
    render_agent,
    render_summary,
)

__all__ = [
    "AgentState",
    "Notifier",
    "NotifierStatistics",
    "NotifyConfig",
    "SenderLike",
    "SummaryCounts",
    "defuse",
    "render_agent",
    "render_summary",
]
