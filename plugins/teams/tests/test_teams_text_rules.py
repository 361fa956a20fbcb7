"""Teams' text rules kept exactly: the marker's room in the provider's own unit, what JSON
escapes make of the text measured as sent, agent HTML made inert, and a long reply with a
transient failure mid-way delivered whole (issue 13)."""

from __future__ import annotations

import json

import anyio
import pytest
from bridge_teams import CAPABILITIES, TEAMS_BUDGET, TeamsProvider
from bridge_teams.testing.fake_teams import MAX_PAYLOAD_BYTES, FakeTeams

from bridge_core import MessageRef, measure
from bridge_core.ledger import (
    MARKER_PARTIAL,
    Delivery,
    DeliveryLedger,
    MemoryBackend,
    MemoryLedgerStore,
    Reply,
    Schedule,
    State,
    is_marked,
)
from bridge_core.runtime.channel import split_reply
from bridge_core.sending import ChannelSender, Post, Priority

pytestmark = pytest.mark.anyio


async def test_a_full_part_resent_with_the_marker_still_fits(
    fake: FakeTeams, provider: TeamsProvider, channel: str
) -> None:
    # Multi-byte text where characters and bytes differ most: the marker must be counted in the
    # provider's unit, or a full part plus the marker is over the maximum.
    fake.windows = ()  # posted back to back here; the pacing is the sender's, tested elsewhere
    parts = split_reply("é" * 30_000, provider)
    assert len(parts) >= 2
    for part in parts:
        marked = f"{MARKER_PARTIAL}\n{part}"
        assert measure(marked, CAPABILITIES.length_unit) <= CAPABILITIES.max_length
        await provider.post(channel, marked)
    assert all(is_marked(text) for text in fake.texts(channel))


@pytest.mark.parametrize("character", ["\x1b", "\x00", "\u2028", "😀", '"', "\\", "é"])
async def test_text_that_json_escapes_is_measured_as_sent(
    fake: FakeTeams, provider: TeamsProvider, channel: str, character: str
) -> None:
    fake.windows = ()
    parts = split_reply(character * 20_000, provider)
    for part in parts:
        await provider.post(channel, part)  # the fake refuses bodies over 28 KB with a 413
    bodies = [len(r.body) for r in fake.requests_to("send_activity")]
    assert max(bodies) <= MAX_PAYLOAD_BYTES
    assert "".join(fake.texts(channel)) == provider.escape(character * 20_000)


@pytest.mark.parametrize(
    "markup",
    [
        "<script>alert(1)</script>",
        '<a href="https://evil.example">click</a>',
        '<img src="x" onerror="alert(1)">',
        "<at>Everyone</at>",
        "<AT id='1'>x</AT>",
        "<iframe src=//x>",
        "<!channel>",
    ],
)
async def test_agent_html_cannot_inject_markup(provider: TeamsProvider, markup: str) -> None:
    escaped = provider.escape(f"before {markup} after")
    assert "<" not in escaped and ">" not in escaped, escaped
    assert "&lt;" in escaped


async def test_escape_keeps_plain_text_and_breaks_mass_pings(provider: TeamsProvider) -> None:
    assert provider.escape("plain words 123") == "plain words 123"
    assert provider.escape("a < b & c") == "a &lt; b &amp; c"
    assert "@everyone" not in provider.escape("hey @everyone")


async def test_a_long_reply_with_a_transient_error_mid_way_is_delivered_whole(
    fake: FakeTeams, provider: TeamsProvider, channel: str
) -> None:
    # No space or newline to cut at: every part is as full as the maximum allows.
    text = "".join(f"{n:05d}—éü😀" for n in range(2_500))
    parts = split_reply(text, provider)
    assert len(parts) >= 3
    sender = ChannelSender(provider, channel=channel, budget=TEAMS_BUDGET)
    failed_once: list[int] = []

    async def deliver(delivery: Delivery) -> MessageRef:
        if delivery.part == 1 and not failed_once:
            # The second part meets a transient 503; the ledger resends it, marked.
            failed_once.append(delivery.part)
            fake.script("send_activity", FakeTeams.error(503, "ServiceUnavailable"))
        return await sender.send(Post(delivery.text), priority=Priority.TERMINAL)

    store = MemoryLedgerStore(MemoryBackend(), owner="host|teams|0")
    await store.open()
    ledger = DeliveryLedger(
        store,
        deliver=deliver,
        profiles={"p"},
        schedule=Schedule(resend_delays=(0.2, 0.4)),
    )
    reply = Reply.answering(
        profile="p", platform="teams", channel=channel, answers="turn-1", text=text, chunks=parts
    )
    async with anyio.create_task_group() as group:
        group.start_soon(sender.run)
        row, _ = await ledger.record(reply)
        row = await ledger.deliver_now(row)
        assert row.state is State.FAILED and row.last_error.startswith("TransportError"), row
        # The resend, as the ledger's timer or the reconnect watcher starts it: part 2 resent
        # with the recovery marker must still fit, then part 3 follows.
        await ledger.redeliver_failed("teams")
        group.cancel_scope.cancel()
    current = await store.get(row.id)
    assert current is not None and current.state is State.DELIVERED, current
    delivered = fake.texts(channel)
    assert fake.count("send_activity") == len(parts) + 1  # one refused, each part once more
    bodies = [t.split("\n", 1)[1] if is_marked(t) else t for t in delivered]
    assert "".join(bodies) == "".join(parts), "every part arrived, none cut"
    assert any(is_marked(t) for t in delivered), "the resent part carries the marker"
    assert all(len(json.dumps(t)) - 2 <= CAPABILITIES.max_length for t in delivered)
