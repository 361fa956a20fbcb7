"""Streamed replies: an agent's answer shown as it is written, paced, its final text the ledger's.

Imports only the vocabulary; talks to the channel's sender through ``StreamSender``. How the
runtime uses it (``bridge_core.runtime.channel``)::

    stream = ReplyStream(sender, provider, key=("stream", obligation), split=parts_of)
    async for delta in await deltas_of(agent_result):
        stream.feed(delta)                  # synchronous; latest text wins
    result = await stream.finish()          # text + the partial messages' refs
    ledger.record(Reply(..., chunks=parts_of(result.text), partials=result.partials))
    # delivery: stream.final_writes(part, text) edits each partial with its final text

See ``bridge_core.streams.reply`` for the behaviour and ``docs/adr/0090-*`` for why.
"""

from bridge_core.streams.protocol import StreamSender
from bridge_core.streams.reply import (
    CURSOR,
    INTERRUPTED,
    FinalWrite,
    ReplyStream,
    StreamResult,
    StreamStatistics,
)
from bridge_core.streams.source import StreamTypeError, deltas_of
from bridge_core.streams.split import PartSplitter

__all__ = [
    "CURSOR",
    "INTERRUPTED",
    "FinalWrite",
    "PartSplitter",
    "ReplyStream",
    "StreamResult",
    "StreamSender",
    "StreamStatistics",
    "StreamTypeError",
    "deltas_of",
]
