"""The provider the in-process benches send through: it accepts every post and edit and keeps
nothing, so the time and memory measured are the core's own (the console provider keeps every
message it showed, which grows with sends, not events)."""

from __future__ import annotations

from bridge_core.provider import Capabilities, ChatProvider, MessageRef

__all__ = ["NullProvider"]


class NullProvider(ChatProvider):
    name = "null"

    def __init__(self, *, max_length: int = 4000) -> None:
        self.capabilities = Capabilities(edit=True, max_length=max_length, probe=True)
        self.sends = 0

    async def post(self, channel: str, text: str, *, thread: str | None = None) -> MessageRef:
        self.sends += 1
        return MessageRef(channel, f"m{self.sends}", thread)

    async def edit(self, ref: MessageRef, text: str) -> MessageRef:
        self.sends += 1
        return ref
