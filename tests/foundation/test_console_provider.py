"""The console provider: transcript lines, scripted faults, probe, inbound, on asyncio and trio."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import bridge_teams.plugin
import pytest
import trio.testing

from bridge_core.config import parse_config
from bridge_core.hookspecs import ProviderContext
from bridge_core.plugins import create_plugin_manager
from bridge_core.provider import (
    ChatProvider,
    Forbidden,
    InboundMessage,
    MessageRef,
    MessageRejected,
    NotFound,
    RateLimited,
    TransportError,
    Unreachable,
)
from bridge_core.providers.console import ConsoleProvider, ConsoleSettings, FaultSpec

pytestmark = pytest.mark.anyio


def transcript(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


_OPEN: list[ConsoleProvider] = []


@pytest.fixture(autouse=True)
def _close_providers() -> Iterator[None]:
    yield
    while _OPEN:
        _OPEN.pop().close()


def quiet(tmp_path: Path, **settings: Any) -> ConsoleProvider:
    provider = ConsoleProvider(
        ConsoleSettings(output="none", transcript=tmp_path / "t.jsonl", **settings)
    )
    _OPEN.append(provider)
    return provider


async def test_posts_edits_and_threads_are_written_one_flushed_line_each(tmp_path: Path) -> None:
    provider = quiet(tmp_path)
    ref = await provider.post("ops", "agent a1 spawned")
    # Flushed per line: readable before the provider is closed.
    assert transcript(tmp_path / "t.jsonl")[0]["op"] == "post"
    reply = await provider.post("ops", "in the thread", thread=ref.message_id)
    edited = await provider.edit(ref, "agent a1 finished ✅")
    await provider.aclose()
    lines = transcript(tmp_path / "t.jsonl")
    assert [line["op"] for line in lines] == ["post", "post", "edit"]
    assert set(lines[0]) == {
        "t",
        "at",
        "op",
        "channel",
        "thread",
        "message_id",
        "text",
        "error",
        "retry_after",
    }
    assert lines[1]["thread"] == ref.message_id == reply.thread
    assert lines[2] == {
        **lines[2],
        "message_id": ref.message_id,
        "text": "agent a1 finished ✅",
        "error": None,
    }
    assert edited == ref
    assert provider.text_of(ref.message_id) == "agent a1 finished ✅"
    assert len({line["message_id"] for line in lines}) == 2


@pytest.mark.parametrize(
    "anyio_backend", [("trio", {"clock": trio.testing.MockClock(autojump_threshold=0)})]
)
async def test_transcript_time_is_virtual_under_trio_mock_clock(tmp_path: Path) -> None:
    provider = quiet(tmp_path)
    await provider.post("ops", "first")
    await anyio.sleep(3600)  # an hour of virtual time, instantly
    await provider.post("ops", "an hour later")
    times = [line["t"] for line in transcript(tmp_path / "t.jsonl")]
    assert times == [0.0, 3600.0]


async def test_a_run_after_a_kill_that_cut_a_record_starts_on_a_fresh_line(
    tmp_path: Path,
) -> None:
    from bridge_core.testing.budget import read_transcript

    provider = quiet(tmp_path)
    await provider.post("ops", "before the kill")
    await provider.aclose()
    path = tmp_path / "t.jsonl"
    whole = path.read_text(encoding="utf-8")
    path.write_text(whole + whole[:40], encoding="utf-8")  # a record cut at a page boundary
    provider = quiet(tmp_path)
    await provider.post("ops", "after the restart")
    await provider.aclose()
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[1] == whole[:40]  # the fragment stays on a line of its own
    assert json.loads(lines[2])["text"] == "after the restart"
    assert [e.text for e in read_transcript(path)] == ["before the kill", "after the restart"]


async def test_message_ids_are_unique_across_restarts(tmp_path: Path) -> None:
    ids = set()
    for _ in range(3):  # three "runs" appending to one transcript
        provider = quiet(tmp_path)
        for _ in range(5):
            ids.add((await provider.post("ops", "x")).message_id)
        await provider.aclose()
    assert len(ids) == 15
    assert len(transcript(tmp_path / "t.jsonl")) == 15


async def test_a_scripted_fault_fails_the_next_send_only(tmp_path: Path) -> None:
    provider = quiet(tmp_path)
    ok = await provider.post("ops", "before")
    provider.script_fault("ops", RateLimited(retry_after=2.5))
    provider.script_fault("dev", TransportError("502"))
    with pytest.raises(RateLimited) as caught:
        await provider.edit(ok, "during")
    assert caught.value.retry_after == 2.5
    await provider.edit(ok, "after")  # the fault was used up
    with pytest.raises(TransportError):
        await provider.post("dev", "dev message")
    lines = transcript(tmp_path / "t.jsonl")
    errors = [line for line in lines if line["op"] == "error"]
    assert errors[0] == {
        **errors[0],
        "channel": "ops",
        "message_id": ok.message_id,
        "error": "RateLimited",
        "retry_after": 2.5,
        "text": "during",
        "failed_op": "edit",
    }
    assert errors[1]["error"] == "TransportError" and errors[1]["retry_after"] is None
    assert provider.text_of(ok.message_id) == "after"


async def test_faults_listed_in_the_settings_queue_up(tmp_path: Path) -> None:
    faults = [
        FaultSpec(channel="ops", error="Forbidden", count=2),
        FaultSpec(channel="ops", error="Unreachable"),
        FaultSpec(channel="ops", error="MessageRejected", message="too long"),
    ]
    provider = quiet(tmp_path, faults=faults)
    assert provider.pending_faults("ops") == 4
    for expected in (Forbidden, Forbidden, Unreachable, MessageRejected):
        with pytest.raises(expected):
            await provider.post("ops", "x")
    await provider.post("ops", "finally")


async def test_block_makes_sends_forbidden_and_probe_false(tmp_path: Path) -> None:
    provider = quiet(tmp_path, blocked=["ops"])
    assert await provider.probe("ops") is False
    assert await provider.probe("dev") is True
    with pytest.raises(Forbidden):
        await provider.post("ops", "x")
    provider.unblock("ops")
    assert await provider.probe("ops") is True
    ref = await provider.post("ops", "x")
    provider.block("ops")
    with pytest.raises(Forbidden):
        await provider.edit(ref, "y")


async def test_editing_an_unknown_message_is_not_found(tmp_path: Path) -> None:
    provider = quiet(tmp_path)
    with pytest.raises(NotFound):
        await provider.edit(MessageRef(channel="ops", message_id="nope"), "x")
    ref = await provider.post("ops", "x")
    with pytest.raises(NotFound):  # the right id in the wrong channel
        await provider.edit(MessageRef(channel="dev", message_id=ref.message_id), "x")


async def test_too_long_and_closed_are_provider_errors(tmp_path: Path) -> None:
    provider = quiet(tmp_path)
    with pytest.raises(MessageRejected, match="exceeds the console's max_length 4000"):
        await provider.post("ops", "x" * 4001)
    ref = await provider.post("ops", "fits")
    with pytest.raises(MessageRejected, match="max_length"):
        await provider.edit(ref, "x" * 4001)
    await provider.aclose()
    with pytest.raises(Unreachable):
        await provider.post("ops", "x")


async def test_rendering_prints_text_literally_and_marks_edits() -> None:
    out = io.StringIO()
    provider = ConsoleProvider(ConsoleSettings(width=200, color=False), output=out)
    ref = await provider.post("ops", "[bold red]not markup[/] @everyone")
    await provider.edit(ref, "second version")
    provider.script_fault("ops", RateLimited(retry_after=1.0))
    with pytest.raises(RateLimited):
        await provider.post("ops", "z")
    text = out.getvalue()
    assert "#ops" in text and ref.message_id in text
    assert "[bold red]not markup[/] @everyone" in text
    assert f"✎ {ref.message_id} (edit 1) second version" in text
    assert "post failed: RateLimited" in text
    assert provider.escape("@everyone look") == "@\u200beveryone look"


async def test_later_lines_of_a_message_hang_under_the_first() -> None:
    out = io.StringIO()
    provider = ConsoleProvider(ConsoleSettings(width=100, color=False), output=out)
    await provider.post("ops", "first line\nsecond line")
    first, second = out.getvalue().splitlines()
    assert first.endswith("first line")
    assert second == " " * 10 + "second line"


async def _collect(provider: ConsoleProvider) -> list[InboundMessage]:
    received: list[InboundMessage] = []

    async def sink(message: InboundMessage) -> None:
        received.append(message)

    await provider.receive(sink)
    return received


async def test_inbound_lines_from_a_file_become_messages(tmp_path: Path) -> None:
    source = tmp_path / "typed.txt"
    source.write_text("hello there\n\n#dev deploy please\nthird 🚀\n")
    provider = ConsoleProvider(
        ConsoleSettings(
            output="none", inbound=str(source), inbound_channel="ops", inbound_author="ana"
        ),
        profile="term",
    )
    received = await _collect(provider)
    assert [(m.channel, m.text) for m in received] == [
        ("ops", "hello there"),
        ("dev", "deploy please"),
        ("ops", "third 🚀"),
    ]
    assert {m.author for m in received} == {"ana"}
    assert {(m.platform, m.profile, m.author_is_bot) for m in received} == {
        ("console", "term", False)
    }
    assert len({m.message_id for m in received}) == 3


async def test_inbound_from_standard_input() -> None:
    provider = ConsoleProvider(
        ConsoleSettings(output="none", inbound="-"), stdin=io.StringIO("one\ntwo\n")
    )
    assert [m.text for m in await _collect(provider)] == ["one", "two"]
    assert await _collect(ConsoleProvider(ConsoleSettings(output="none"))) == []


async def test_the_registered_factory_builds_a_console_provider(tmp_path: Path) -> None:
    console_type = create_plugin_manager(load_entry_points=False).providers.get("console")
    settings = console_type.settings_model.model_validate(
        {"output": "none", "transcript": str(tmp_path / "f.jsonl")}
    )
    provider = console_type.factory(settings, ProviderContext(profile="p1"))
    assert isinstance(provider, ChatProvider) and isinstance(provider, ConsoleProvider)
    async with provider:
        await provider.post("ops", "via the factory")
    assert transcript(tmp_path / "f.jsonl")[0]["text"] == "via the factory"


def test_settings_budget_sets_the_profiles_budget() -> None:
    # The budget's preset names come from the plugins (bridge-teams offers "teams").
    manager = create_plugin_manager(load_entry_points=False, extra_plugins=[bridge_teams.plugin])
    data = {"profiles": {"p": {"provider": "console", "settings": {"budget": "teams"}}}}
    send_budget = parse_config(data, providers=manager.providers).profiles["p"].send_budget
    assert send_budget is not None and send_budget.burst == 7


async def test_a_missing_inbound_file_is_unreachable(tmp_path: Path) -> None:
    provider = ConsoleProvider(ConsoleSettings(output="none", inbound=str(tmp_path / "nope")))
    with pytest.raises(Unreachable, match="cannot be read"):
        await _collect(provider)


# ----------------------------------------------------------------------- what a terminal acts on

ESCAPES = {
    "OSC title": "\x1b]0;pwned\x07",
    "OSC with ST": "\x1b]8;;http://evil\x1b\\",
    "CSI clear": "\x1b[2J\x1b[H",
    "CSI colour": "\x1b[31m",
    "C1 CSI": "\x9b2J",
    "C1 OSC": "\x9d0;pwned\x9c",
    "carriage return": "hidden\roverwritten",
    "backspace and DEL": "ab\x08\x08\x7f",
    "bell, form feed, vertical tab, NUL": "\x07\x0c\x0b\x00",
}
RAW = (
    {chr(c) for c in range(0x20) if chr(c) not in "\n"}
    | {chr(0x7F)}
    | {chr(c) for c in range(0x80, 0xA0)}
)


@pytest.mark.parametrize("escape", list(ESCAPES.values()), ids=list(ESCAPES))
async def test_no_control_character_reaches_the_terminal_raw(escape: str) -> None:
    out = io.StringIO()
    provider = ConsoleProvider(
        ConsoleSettings(width=200, color=False, inbound="-"),
        output=out,
        stdin=io.StringIO(f"person says {escape}\n"),
    )
    ref = await provider.post(f"ops{escape}", f"agent says {escape} done", thread=escape)
    await provider.edit(ref, f"edited {escape}")
    assert len(await _collect(provider)) == 1
    shown = out.getvalue()
    assert "agent says" in shown and "person says" in shown and "edited" in shown
    assert not set(shown) & (RAW - {"\t"}), repr(shown)
    assert "\ud800" not in shown


async def test_transcript_lines_carry_no_raw_control_and_no_lone_surrogate(
    tmp_path: Path,
) -> None:
    provider = quiet(tmp_path)
    text = "c1 \x9b2J del \x7f esc \x1b]0;t\x07 lone \ud800 ok 🚀"
    await provider.post("ops", text)
    raw = (tmp_path / "t.jsonl").read_bytes().decode("utf-8")  # strict: it is UTF-8
    assert not any(ch in raw for ch in RAW)
    (line,) = transcript(tmp_path / "t.jsonl")
    assert line["text"] == text.replace("\ud800", "\ufffd")


async def test_inbound_bytes_that_are_not_utf8_become_replacement_characters(
    tmp_path: Path,
) -> None:
    lines = (
        b"caf\xe9 ok\n"
        b'{"id": "m1", "text": "lone \\ud800 and NUL \\u0000", "author": "b\\udcff"}\n'
        + b'{"id": "deep", "text": '
        + b"[" * 100_000
        + b"\n"
        + b"last\n"
    )
    source = tmp_path / "typed.txt"
    source.write_bytes(lines)
    from_file = await _collect(ConsoleProvider(ConsoleSettings(output="none", inbound=str(source))))
    stdin = io.TextIOWrapper(io.BytesIO(lines), encoding="utf-8")  # strict, as a terminal's is
    from_stdin = await _collect(
        ConsoleProvider(ConsoleSettings(output="none", inbound="-"), stdin=stdin)
    )
    for received in (from_file, from_stdin):
        assert received[0].text == "caf\ufffd ok"
        assert received[1].text == "lone \ufffd and NUL \ufffd"
        assert received[1].author == "b\ufffd"
        assert received[-1].text == "last"
        for message in received:
            for value in (message.text, message.author, message.message_id, message.channel):
                value.encode("utf-8")
                assert "\0" not in value
