"""The error taxonomy and its one reading table, shared by the notifier and the ledger."""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge_core.provider import (
    ERROR_TABLE,
    ConnectionLost,
    Forbidden,
    LedgerAction,
    MessageRejected,
    NotFound,
    NotifierAction,
    ProviderError,
    RateLimited,
    TransportError,
    Unreachable,
    reading_for,
)

DOCS = Path(__file__).resolve().parents[2] / "docs" / "plugins" / "errors.md"

EXPECTED = {
    RateLimited: (NotifierAction.PAUSE_CHANNEL, LedgerAction.WAIT_PENALTY),
    NotFound: (NotifierAction.DROP_REF_REPOST, LedgerAction.RESEND_AS_POST),
    Forbidden: (NotifierAction.MARK_UNHEALTHY, LedgerAction.KEEP_FOR_RECHECK),
    Unreachable: (NotifierAction.GIVE_UP_CHANNEL, LedgerAction.ABANDON),
    MessageRejected: (NotifierAction.DROP_RENDERING, LedgerAction.ABANDON),
    TransportError: (NotifierAction.BACK_OFF, LedgerAction.RESEND_SCHEDULE),
}


def test_every_direct_subclass_of_provider_error_has_exactly_one_row() -> None:
    classes = [row.error for row in ERROR_TABLE]
    assert sorted(c.__name__ for c in classes) == sorted(
        c.__name__ for c in ProviderError.__subclasses__()
    )
    assert len(set(classes)) == len(classes)


@pytest.mark.parametrize("error_class", list(EXPECTED), ids=lambda c: c.__name__)
def test_each_error_reads_as_the_seeds_say(error_class: type[ProviderError]) -> None:
    error = error_class("x") if error_class is not RateLimited else RateLimited(retry_after=3)
    reading = reading_for(error)
    assert reading.error is error_class
    assert (reading.notifier, reading.ledger) == EXPECTED[error_class]
    assert reading.meaning


def test_subclasses_and_strangers_read_as_transient() -> None:
    assert reading_for(ConnectionLost("socket closed")).error is TransportError
    assert reading_for(ValueError("not ours")).error is TransportError
    assert reading_for(ProviderError("unclassified")).error is TransportError


def test_a_rejected_message_is_not_a_dead_channel() -> None:
    rejected, unreachable = reading_for(MessageRejected("too long")), reading_for(Unreachable("x"))
    assert rejected.error is MessageRejected
    assert rejected.notifier is not unreachable.notifier  # only Unreachable gives a channel up
    assert not issubclass(MessageRejected, (Unreachable, TransportError))


def test_the_transient_row_is_last_and_is_the_fallback() -> None:
    # reading_for falls back on the TransportError row wherever it sits in the table.
    assert ERROR_TABLE[-1].error is TransportError
    assert reading_for(ProviderError("unclassified")) is next(
        row for row in ERROR_TABLE if row.error is TransportError
    )


def test_rate_limited_keeps_its_retry_after() -> None:
    assert RateLimited(retry_after=1.5).retry_after == 1.5
    assert RateLimited().retry_after is None
    assert "retry_after=2.0" in repr(RateLimited("slow", retry_after=2.0))


def test_the_docs_name_every_error_class() -> None:
    text = DOCS.read_text()
    for row in ERROR_TABLE:
        assert f"`{row.error.__name__}" in text or row.error.__name__ in text
    assert "ConnectionLost" in text
