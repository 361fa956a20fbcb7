"""A natively streamed reply longer than one part rolls over to the next message while it streams.

With native streaming (append-only: Slack's chat.appendStream), a part's cut can move back
before what the platform already shows (the chunker prefers a paragraph break in the part's last
fifth once the text passes the limit). Appending cannot shorten a message, and the stream used to
pick that part as the next to write forever: nothing more was shown until the final.
"""

from __future__ import annotations

import anyio
from bridge_slack import SLACK_BUDGET

from bridge_core.provider import Capabilities, ChatProvider, LengthUnit, MessageRef, StreamingMode
from bridge_core.runtime.streaming import reply_splitter
from bridge_core.sending import ChannelSender
from bridge_core.streams import ReplyStream
from bridge_core.testing.clock import run_virtual


class NativeRecorder(ChatProvider):
    name = "native"
    capabilities = Capabilities(
        edit=True,
        max_length=3900,
        length_unit=LengthUnit.CHARACTERS,
        streaming=StreamingMode.NATIVE,
    )

    def __init__(self) -> None:
        self.calls: list[tuple[float, str]] = []

    def _record(self, op: str, ref: MessageRef) -> MessageRef:
        self.calls.append((anyio.current_time(), op))
        return ref

    async def stream_start(
        self, channel: str, text: str, *, thread: str | None = None
    ) -> MessageRef:
        return self._record("start", MessageRef(channel, str(len(self.calls)), thread))

    async def stream_append(self, ref: MessageRef, text: str) -> MessageRef:
        return self._record("append", ref)

    async def stream_stop(self, ref: MessageRef, text: str) -> MessageRef:
        return self._record("stop", ref)


def test_a_long_native_stream_keeps_showing_progress_in_its_later_messages() -> None:
    async def main() -> None:
        provider = NativeRecorder()
        split = reply_splitter(provider)
        words = [f"xxx{i:04d}" for i in range(1250)]
        text = "".join(w + ("\n\n" if i % 40 == 39 else " ") for i, w in enumerate(words))
        async with ChannelSender(provider, channel="c", budget=SLACK_BUDGET) as sender:
            stream = ReplyStream(sender, provider, key="s", split=split, thread="t1")
            for i in range(0, len(text), 3):  # 3 characters 20 times a second, ~170 s
                stream.feed(text[i : i + 3])
                await anyio.sleep(0.05)
            streamed_until = anyio.current_time()
            starts = [t for t, op in provider.calls if op == "start"]
            last = max(t for t, _ in provider.calls)
        assert len(split(text)) == 3
        assert len(starts) == 3  # every part's message began while the agent streamed
        assert streamed_until - last < 5  # and the writes went on to the end, not frozen

    run_virtual(main)
