"""The per-channel sender: priority classes, the budget gate, edit spacing, pauses, re-checks.

Imports only the vocabulary. See ``bridge_core.sending.sender`` for the behaviour, ``queue``
for the priority classes and the spacing of writes, ``pacing`` for the budget gate, ``failures``
for its reading of provider errors, ``health`` for the channel's health and ``containment`` for
what a sender lets through; and ``docs/adr/0010-*``..``0013-*`` for why it is built this way.
"""

from bridge_core.sending.ops import (
    Edit,
    EditCall,
    Post,
    PostCall,
    Priority,
    SendOp,
    TextSource,
    render_text,
)
from bridge_core.sending.pacing import BudgetGate, SendGate
from bridge_core.sending.sender import (
    BACKOFF_MAX,
    BACKOFF_MIN,
    ChannelSender,
    Outcome,
    OutcomeCallback,
    SenderClosed,
)
from bridge_core.sending.statistics import SenderStatistics

__all__ = [
    "BACKOFF_MAX",
    "BACKOFF_MIN",
    "BudgetGate",
    "ChannelSender",
    "Edit",
    "EditCall",
    "Outcome",
    "OutcomeCallback",
    "Post",
    "PostCall",
    "Priority",
    "SendGate",
    "SendOp",
    "SenderClosed",
    "SenderStatistics",
    "TextSource",
    "render_text",
]
