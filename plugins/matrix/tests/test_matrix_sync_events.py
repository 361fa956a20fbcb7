"""Reading ``/sync`` answers without a server: which membership event is the bot arriving (the
gap of a limited timeline is read through ``receive`` in ``test_matrix_gap``)."""

from __future__ import annotations

from typing import Any

from bridge_matrix.inbound import after_own_arrival, is_own_arrival

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
