"""``chatbridge ledger`` against a ledger a running gateway holds open."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

import anyio
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings

from bridge_core.cli import build_cli
from bridge_core.commands.ledger import parse_age
from bridge_core.ledger import (
    Delivery,
    DeliveryLedger,
    Reply,
    Schedule,
    State,
    is_marked,
    open_store,
)
from bridge_core.provider import MessageRef, Unreachable
from bridge_core.testing.http_fuzz import ANY_TEXT  # surrogates, NUL and controls drawn often

pytestmark = pytest.mark.anyio


def _reply(answers: str, channel: str = "C1") -> Reply:
    return Reply.answering(
        profile="X", platform="console", channel=channel, answers=answers, text=f"re {answers}"
    )


async def _chatbridge_process(*args: str) -> tuple[int, str]:
    """A real process, as an operator would run it next to the gateway."""
    done = await anyio.run_process(
        [sys.executable, "-c", "from bridge_core.cli import main; main()", *args], check=False
    )
    return done.returncode, (done.stdout + done.stderr).decode()


async def _chatbridge(*args: str) -> tuple[int, str]:
    """The CLI in a worker thread: its own event loop and its own connection to the file."""
    result = await anyio.to_thread.run_sync(CliRunner().invoke, build_cli(), list(args))
    return result.exit_code, result.output


async def test_the_cli_works_while_the_gateway_runs_and_retries_on_request(
    tmp_path: Path,
) -> None:
    path = tmp_path / "ledger.db"
    store = await open_store(path)
    sent: list[Delivery] = []
    refuse = {"a"}

    async def deliver(delivery: Delivery) -> MessageRef:
        sent.append(delivery)
        if delivery.obligation_id.endswith("|1:a|0") and refuse:
            raise Unreachable("channel_not_found")
        return MessageRef(delivery.channel, str(len(sent)))

    ledger = DeliveryLedger(
        store, deliver=deliver, profiles={"X"}, schedule=Schedule(sweep_interval=0.05)
    )
    async with anyio.create_task_group() as group:
        await group.start(ledger.run)
        abandoned = await ledger.submit(_reply("a"))
        assert abandoned.state is State.ABANDONED
        await ledger.submit(_reply("b", channel="C2"))
        await ledger.record(_reply("c"))

        code, out = await _chatbridge_process("ledger", "--ledger", str(path), "counts", "--json")
        assert code == 0, out
        assert json.loads(out) == {
            "pending": 1,
            "attempting": 0,
            "delivered": 1,
            "failed": 0,
            "abandoned": 1,
        }
        code, out = await _chatbridge(
            "ledger", "--ledger", str(path), "list", "--state", "abandoned", "--json"
        )
        assert code == 0, out
        listed = [json.loads(line) for line in out.splitlines()]
        assert [row["id"] for row in listed] == [abandoned.id]
        assert "channel_not_found" in listed[0]["last_error"]
        code, out = await _chatbridge(
            "ledger", "--ledger", str(path), "list", "--channel", "C2", "--json"
        )
        assert [json.loads(line)["reply_to"] for line in out.splitlines()] == [None]
        code, out = await _chatbridge("ledger", "--ledger", str(path), "retry", "1:X|2:C2|1:b|0")
        assert code == 1 and "is delivered, not abandoned" in out

        refuse.clear()
        code, out = await _chatbridge("ledger", "--ledger", str(path), "retry", abandoned.id)
        assert code == 0, out
        with anyio.fail_after(10):  # the running gateway's sweep sends it
            while (  # noqa: ASYNC110 (the row is in another connection's file: poll it)
                row := await store.get(abandoned.id)
            ) is None or row.state is not State.DELIVERED:
                await anyio.sleep(0.05)
        resent = [d for d in sent if d.obligation_id == abandoned.id]
        assert len(resent) == 2 and is_marked(resent[-1].text)  # it had been tried: marked

        code, out = await _chatbridge(
            "ledger", "--ledger", str(path), "purge", "--state", "delivered", "--yes"
        )
        assert code == 0 and "deleted 2 delivered rows" in out, out
        group.cancel_scope.cancel()
    assert (await store.counts_by_state())[State.PENDING] == 1  # open rows are never purged
    await store.aclose()


def test_cli_errors_name_the_problem(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(build_cli(), ["ledger", "--ledger", str(tmp_path / "no.db"), "counts"])
    assert result.exit_code == 1 and "no ledger at" in result.output
    result = runner.invoke(
        build_cli(), ["ledger", "--ledger", str(tmp_path / "no.db"), "list", "--newer-than", "3y"]
    )
    assert result.exit_code == 2 and "not an age" in result.output
    assert parse_age("90") == 90 and parse_age("15m") == 900 and parse_age("7d") == 604800
    result = runner.invoke(build_cli(), ["ledger", "--ledger", "redis://x", "counts"])
    assert result.exit_code == 1 and "neither a file path nor a postgresql:// URL" in result.output


def _ledger_file(path: Path) -> Path:
    async def make() -> None:
        store = await open_store(str(path))
        await store.aclose()

    anyio.run(make)
    return path


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["retry", "\udcff"], "OBLIGATION_ID"),  # an undecodable byte of argv, as Python has it
        (["list", "--channel", "a\x00b"], "--channel"),
    ],
)
def test_an_argument_the_store_cannot_take_is_named(
    tmp_path: Path, args: list[str], names: str
) -> None:
    ledger = _ledger_file(tmp_path / "l.db")
    result = CliRunner().invoke(build_cli(), ["ledger", "--ledger", str(ledger), *args])
    assert result.exit_code == 2 and names in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_a_locked_ledger_is_an_error_saying_so(tmp_path: Path) -> None:
    ledger = _ledger_file(tmp_path / "l.db")
    holder = sqlite3.connect(ledger, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another process's write, held past the busy timeout
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr("bridge_core.ledger.sqlschema.BUSY_TIMEOUT_MS", 50)
            result = CliRunner().invoke(
                build_cli(), ["ledger", "--ledger", str(ledger), "purge", "--yes"]
            )
            # a report reads beside the write (WAL): it neither waits nor fails
            counts = CliRunner().invoke(
                build_cli(), ["ledger", "--ledger", str(ledger), "counts", "--json"]
            )
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert result.exit_code == 1, result.output
    assert "locked" in result.output and "try again" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert counts.exit_code == 0, counts.output
    assert set(json.loads(counts.output).values()) == {0}  # the empty ledger, read as it is


def test_a_postgres_url_that_cannot_be_parsed_is_an_error_not_a_traceback() -> None:
    result = CliRunner().invoke(build_cli(), ["ledger", "--ledger", "postgresql://[bad", "counts"])
    assert result.exit_code == 1 and "cannot be parsed" in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


ANY_ARGUMENT = ANY_TEXT.filter(lambda text: not text.startswith("-"))


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(argument=ANY_ARGUMENT)
def test_any_argument_is_answered_or_named_never_a_traceback(tmp_path: Path, argument: str) -> None:
    ledger = tmp_path / "fuzz.db"
    if not ledger.exists():
        _ledger_file(ledger)
    for args in (["retry", argument], ["list", "--channel", argument]):
        result = CliRunner().invoke(build_cli(), ["ledger", "--ledger", str(ledger), *args])
        assert result.exception is None or isinstance(result.exception, SystemExit), (
            args,
            result.output,
        )
        assert result.exit_code in (0, 1, 2), (args, result.output)
