"""Reading ``/sync`` answers without a server: which membership event is the bot arriving, and
how a limited timeline's gap is paged (bounds and failures a real server cannot be made to
show cheaply)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import respx
from bridge_matrix import MatrixProvider, MatrixSettings
from bridge_matrix.inbound import after_own_arrival, is_own_arrival
from bridge_matrix.provider import GAP_PAGE, GAP_PAGES

from bridge_core import ConnectionLost

BOT = "@bot:bridge.test"


def member(
    user: str, membership: str, before: str | None, *, top_level: bool = False
) -> dict[str, Any]:
    event: dict[str, Any] = {
        "type": "m.room.member",
        "state_key": user,
        "content": {"membership": membership},
    }
    if before is not None:
        prev = {"membership": before}
        if top_level:
            event["prev_content"] = prev
        else:
            event["unsigned"] = {"prev_content": prev}
    return event


def text(body: str) -> dict[str, Any]:
    return {"type": "m.room.message", "content": {"msgtype": "m.text", "body": body}}


def test_only_the_bots_own_join_from_outside_the_room_is_an_arrival() -> None:
    assert is_own_arrival(member(BOT, "join", None), BOT)
    assert is_own_arrival(member(BOT, "join", "invite"), BOT)
    assert is_own_arrival(member(BOT, "join", "leave", top_level=True), BOT)
    assert not is_own_arrival(member(BOT, "join", "join"), BOT)  # a new display name
    assert not is_own_arrival(member(BOT, "join", "join", top_level=True), BOT)
    assert not is_own_arrival(member("@alice:bridge.test", "join", "invite"), BOT)
    assert not is_own_arrival(member(BOT, "leave", "join"), BOT)


def test_what_came_before_the_latest_arrival_is_dropped() -> None:
    old, new = text("old"), text("new")
    assert after_own_arrival([old, member(BOT, "join", "invite"), new], BOT) == [new]
    assert after_own_arrival([old, member(BOT, "join", "join"), new], BOT) is None
    rejoined = [old, member(BOT, "join", None), text("a"), member(BOT, "join", "leave"), new]
    assert after_own_arrival(rejoined, BOT) == [new]


ROOM = "!room:bridge.test"


def gap_provider() -> MatrixProvider:
    settings = MatrixSettings.model_validate(
        {"homeserver_url": "http://hs.test", "user_id": BOT, "access_token": "t", "inbound": True}
    )
    return MatrixProvider(settings, profile="t")


@pytest.mark.anyio
async def test_a_gap_is_read_for_at_most_gap_pages_and_the_skip_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pages = iter(range(1_000_000))

    def page(request: httpx.Request) -> httpx.Response:
        n = next(pages)
        assert request.url.params["dir"] == "b" and request.url.params["to"] == "s0"
        assert request.url.params["from"] == ("p0" if n == 0 else f"end{n - 1}")
        chunk = [text(f"{n}.{i}") for i in range(GAP_PAGE)]  # newest first, as dir=b reads
        return httpx.Response(200, json={"chunk": chunk, "end": f"end{n}"})

    with respx.mock(base_url="http://hs.test") as mock:
        route = mock.get(url__regex=r"/rooms/.*/messages").mock(side_effect=page)
        async with gap_provider() as provider:
            events = await provider._gap(ROOM, "p0", "s0")
    assert route.call_count == GAP_PAGES
    assert len(events) == GAP_PAGES * GAP_PAGE
    assert events[0]["content"]["body"] == f"{GAP_PAGES - 1}.{GAP_PAGE - 1}"  # oldest first
    assert events[-1]["content"]["body"] == "0.0"
    assert any("are not delivered" in r.getMessage() for r in caplog.records)


@pytest.mark.anyio
async def test_a_gap_stops_at_the_bots_arrival() -> None:
    chunk = [text("after 2"), text("after 1"), member(BOT, "join", "invite"), text("before")]
    with respx.mock(base_url="http://hs.test") as mock:
        mock.get(url__regex=r"/messages").respond(200, json={"chunk": chunk, "end": "e"})
        async with gap_provider() as provider:
            events = await provider._gap(ROOM, "p0", "s0")
    assert [e["content"]["body"] for e in events] == ["after 1", "after 2"]


@pytest.mark.anyio
async def test_a_gap_that_fails_loses_the_connection_and_one_refused_is_skipped() -> None:
    with respx.mock(base_url="http://hs.test") as mock:
        mock.get(url__regex=r"/messages").respond(502, json={"errcode": "M_UNKNOWN"})
        async with gap_provider() as provider:
            with pytest.raises(ConnectionLost):  # the position is not saved: asked again
                await provider._gap(ROOM, "p0", "s0")
    with respx.mock(base_url="http://hs.test") as mock:
        mock.get(url__regex=r"/messages").respond(403, json={"errcode": "M_FORBIDDEN"})
        async with gap_provider() as provider:
            assert await provider._gap(ROOM, "p0", "s0") == []
