"""``Post(key=...)``: the provider reads the post's idempotency key as ``post_key()`` while it
posts, the same key on a retry after a rate limit, and no key for a post without one
(ADR 0080). Virtual time."""

from __future__ import annotations

import pytest

from bridge_core.provider import (
    ChatProvider,
    MessageRef,
    RateLimited,
    SendBudget,
    post_key,
    posting_with_key,
)
from bridge_core.sending import ChannelSender, Post

pytestmark = pytest.mark.anyio
ONE_A_SECOND = SendBudget(burst=1, per_second=1.0, edit_spacing=0.0)


class KeyRecorder(ChatProvider):
    """Posts nothing anywhere; records the key of each post and refuses the first ``refuse``."""

    name = "recorder"

    def __init__(self, *, refuse: int = 0) -> None:
        self.seen: list[tuple[str, str | None]] = []
        self.refuse = refuse

    async def post(self, channel: str, text: str, *, thread: str | None = None) -> MessageRef:
        self.seen.append((text, post_key()))
        if self.refuse:
            self.refuse -= 1
            raise RateLimited("slow down", retry_after=1.0)
        return MessageRef(channel, f"m{len(self.seen)}")


async def test_the_provider_sees_the_posts_key_and_only_while_posting() -> None:
    provider = KeyRecorder()
    async with ChannelSender(provider, channel="c", budget=ONE_A_SECOND) as sender:
        await sender.send(Post("keyed", key="obligation:0"))
        await sender.send(Post("unkeyed"))
    assert provider.seen == [("keyed", "obligation:0"), ("unkeyed", None)]
    assert post_key() is None


async def test_a_retry_after_a_rate_limit_carries_the_same_key() -> None:
    provider = KeyRecorder(refuse=1)
    async with ChannelSender(provider, channel="c", budget=ONE_A_SECOND) as sender:
        await sender.send(Post("reply", key="obligation:1"))
    assert provider.seen == [("reply", "obligation:1"), ("reply", "obligation:1")]


def test_posting_with_key_restores_the_outer_key() -> None:
    with posting_with_key("outer"):
        with posting_with_key("inner"):
            assert post_key() == "inner"
        assert post_key() == "outer"
    assert post_key() is None
