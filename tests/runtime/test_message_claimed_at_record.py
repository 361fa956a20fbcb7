"""``POST /v1/messages`` on a channel whose sender would post at once: the row is recorded
already claimed, one commit before the send instead of two (ADR 0121). Replies that queue
behind a send are still recorded ``pending`` and claimed at their turn."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any, ClassVar

import anyio
import pytest

from bridge_core.ledger import DeliveryLedger, is_marked
from bridge_core.ledger.sqlite import SQLiteLedgerStore
from bridge_core.ledger.sqlmerged import MergedRecords
from bridge_core.provider import Capabilities, ChatProvider, MessageRef
from bridge_core.runtime import Gateway, GatewayOptions, MessageRequest

from .conftest import one_channel

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("builtin_plugins_only")]


@pytest.fixture
def claims(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The ids the SQLite store is asked to claim (the record's own claim is not one)."""
    asked: list[str] = []
    claim = SQLiteLedgerStore.claim

    async def counted(self: SQLiteLedgerStore, obligation_id: str, **kwargs: Any) -> Any:
        asked.append(obligation_id)
        return await claim(self, obligation_id, **kwargs)

    monkeypatch.setattr(SQLiteLedgerStore, "claim", counted)
    return asked


class HeldProvider(ChatProvider):
    """Posts wait for ``release`` while ``hold`` is set; every post is kept in ``posted``."""

    name = "held"
    capabilities = Capabilities(edit=False, max_length=1000)
    hold: ClassVar[bool]
    started: ClassVar[anyio.Event]
    release: ClassVar[anyio.Event]
    posted: ClassVar[list[str]]

    async def post(self, channel: str, text: str, *, thread: str | None = None) -> MessageRef:
        HeldProvider.started.set()
        if HeldProvider.hold:
            await HeldProvider.release.wait()
        HeldProvider.posted.append(text)
        return MessageRef(channel, str(len(HeldProvider.posted)))


def reset(*, hold: bool) -> None:
    HeldProvider.hold = hold
    HeldProvider.started, HeldProvider.release, HeldProvider.posted = (
        anyio.Event(),
        anyio.Event(),
        [],
    )


async def delivered(gateway: Gateway, count: int) -> None:
    """``count`` replies settled as delivered, and the channel idle again: the task that sent
    the last one gives the channel's claim back just after its settle commits, so a reader of
    the file can see the settle first (a race the test lost once, on a loaded machine)."""
    api = gateway._assembled().api
    with anyio.fail_after(10):
        while (await gateway.ledger_counts())["delivered"] != count:  # noqa: ASYNC110
            await anyio.sleep(0.01)
        while api._begun:  # noqa: ASYNC110
            await anyio.sleep(0.01)


async def test_a_message_to_an_idle_channel_is_claimed_by_its_record(
    tmp_path: Path, claims: list[str]
) -> None:
    reset(hold=False)
    gateway = Gateway(one_channel(tmp_path, HeldProvider), options=GatewayOptions(http=False))
    async with gateway:
        for number in range(3):  # one at a time: the channel is idle each time
            receipt = await gateway.accept_message(
                MessageRequest(channel="ops", text=f"note {number}", idempotency_key=f"k{number}")
            )
            await delivered(gateway, number + 1)
        again = await gateway.accept_message(
            MessageRequest(channel="ops", text="note 2", idempotency_key="k2")
        )
        assert again.duplicate and again.obligation == receipt.obligation
        await anyio.sleep(0.1)
    assert HeldProvider.posted == ["note 0", "note 1", "note 2"]  # clean, once each
    assert claims == []


async def test_messages_behind_a_send_are_recorded_pending_and_claimed_at_their_turn(
    tmp_path: Path, claims: list[str]
) -> None:
    reset(hold=True)
    gateway = Gateway(one_channel(tmp_path, HeldProvider), options=GatewayOptions(http=False))
    async with gateway:
        first = await gateway.accept_message(MessageRequest(channel="ops", text="one"))
        with anyio.fail_after(10):
            await HeldProvider.started.wait()
        later = [
            await gateway.accept_message(MessageRequest(channel="ops", text=text))
            for text in ("two", "three")
        ]
        counts = await gateway.ledger_counts()
        assert (counts["attempting"], counts["pending"]) == (1, 2), counts
        HeldProvider.release.set()
        await delivered(gateway, 3)
    assert sorted(claims) == sorted(receipt.obligation for receipt in later)
    assert first.obligation not in claims
    assert sorted(HeldProvider.posted) == ["one", "three", "two"]
    assert not any(is_marked(text) for text in HeldProvider.posted)


class FileReadingProvider(ChatProvider):
    """Each post reads its message's row from the ledger file, on a connection of its own, at
    the moment of the call: what a crash right then would leave."""

    name = "file-reading"
    capabilities = Capabilities(edit=False, max_length=1000)
    ledger_file: ClassVar[Path]
    seen: ClassVar[list[tuple[str, tuple[object, ...] | None]]]

    async def post(self, channel: str, text: str, *, thread: str | None = None) -> MessageRef:
        with sqlite3.connect(FileReadingProvider.ledger_file) as conn:
            found = conn.execute(
                "SELECT state, fence, attempts FROM ledger WHERE text = ?", (text,)
            ).fetchone()
        FileReadingProvider.seen.append((text, None if found is None else tuple(found)))
        return MessageRef(channel, str(len(FileReadingProvider.seen)))


async def test_a_message_handed_to_its_sender_while_recorded_is_in_the_file_before_its_post(
    tmp_path: Path, claims: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """ADR 0164: the send is made ready while the record commits and goes out after."""
    FileReadingProvider.ledger_file = tmp_path / "bridge.sqlite3"
    FileReadingProvider.seen = []
    in_flight: list[str] = []
    send_recorded = DeliveryLedger.send_recorded

    async def counted(self: DeliveryLedger, recording: Any) -> Any:
        in_flight.append(recording.fresh.id)
        return await send_recorded(self, recording)

    monkeypatch.setattr(DeliveryLedger, "send_recorded", counted)
    config = one_channel(tmp_path, FileReadingProvider)
    gateway = Gateway(config, options=GatewayOptions(http=False))
    async with gateway:
        receipts = []
        for number in range(3):
            receipts.append(
                await gateway.accept_message(MessageRequest(channel="ops", text=f"m{number}"))
            )
            await delivered(gateway, number + 1)
    assert in_flight == [receipt.obligation for receipt in receipts]
    assert FileReadingProvider.seen == [(f"m{n}", ("attempting", 1, 1)) for n in range(3)]
    assert claims == []


async def test_a_record_that_fails_sends_nothing_and_frees_the_channel(
    tmp_path: Path, claims: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    reset(hold=False)
    run_many = MergedRecords.run_many
    failures = [sqlite3.OperationalError("disk I/O error")]

    def failing(self: MergedRecords, conn: sqlite3.Connection, items: Any) -> Any:
        if failures:
            raise failures.pop()
        return run_many(self, conn, items)

    monkeypatch.setattr(MergedRecords, "run_many", failing)
    # the failure is patched into this process: the records' statement runs here only on the
    # writer thread (a writer process, the gateway's default, runs its own copy)
    options = GatewayOptions(http=False, ledger_writer="thread")
    gateway = Gateway(one_channel(tmp_path, HeldProvider), options=options)
    async with gateway:
        with pytest.raises(sqlite3.OperationalError):
            await gateway.accept_message(MessageRequest(channel="ops", text="lost"))
        await anyio.sleep(0.1)  # its send's task ends (sending nothing) and frees the channel
        await gateway.accept_message(MessageRequest(channel="ops", text="kept"))
        await delivered(gateway, 1)
        counts = await gateway.ledger_counts()
    assert HeldProvider.posted == ["kept"]
    assert sum(counts.values()) == 1
    assert claims == []  # the second was recorded claimed too: the first freed the channel
