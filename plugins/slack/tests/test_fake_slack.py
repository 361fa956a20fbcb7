"""FakeSlack validates requests like Slack does, so a provider that sends the wrong thing fails."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import anyio
import anyio.to_thread
import pytest
import requests
from bridge_slack.testing.fake_slack import (
    SLACK_MAX_TEXT,
    FakeSlack,
    event_callback,
    message_event,
    signed_headers,
)
from slack_sdk.signature import SignatureVerifier


def call(
    fake: FakeSlack, method: str, *, token: str | None = None, **kwargs: object
) -> requests.Response:
    headers = {"Authorization": f"Bearer {token or fake.token}"}
    return requests.post(fake.api_url + method, headers=headers, timeout=5, **kwargs)  # type: ignore[arg-type]


def test_json_posts_with_the_bearer_token_succeed(fake_slack: FakeSlack) -> None:
    answer = call(fake_slack, "chat.postMessage", json={"channel": "C0GENERAL", "text": "hi"})
    data = answer.json()
    assert answer.status_code == 200 and data["ok"] is True
    assert data["channel"] == "C0GENERAL" and data["message"]["text"] == "hi"
    assert fake_slack.texts("C0GENERAL") == ["hi"]


def test_a_form_body_may_carry_the_token(fake_slack: FakeSlack) -> None:
    answer = requests.post(
        fake_slack.api_url + "chat.postMessage",
        data={"token": fake_slack.token, "channel": "C0GENERAL", "text": "form"},
        timeout=5,
    )
    assert answer.json()["ok"] is True


@pytest.mark.parametrize(
    ("headers", "body", "error"),
    [
        ({}, {"json": {"channel": "C0GENERAL", "text": "x"}}, "not_authed"),
        (
            {"Authorization": "Bearer xoxb-wrong"},
            {"json": {"channel": "C0GENERAL"}},
            "invalid_auth",
        ),
        ({"Authorization": "Basic abc"}, {"json": {"channel": "C0GENERAL"}}, "invalid_auth"),
    ],
)
def test_missing_or_wrong_credentials_are_refused(
    fake_slack: FakeSlack, headers: dict[str, str], body: dict[str, object], error: str
) -> None:
    answer = requests.post(
        fake_slack.api_url + "chat.postMessage",
        headers=headers,
        timeout=5,
        **body,  # type: ignore[arg-type]
    )
    assert (answer.status_code, answer.json()) == (200, {"ok": False, "error": error})


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"json": {"channel": "C0GENERAL"}}, "no_text"),
        ({"json": {"channel": "C0NOPE", "text": "x"}}, "channel_not_found"),
        ({"json": {"text": "x"}}, "channel_not_found"),
        ({"json": {"channel": "C0GENERAL", "text": "x" * (SLACK_MAX_TEXT + 1)}}, "msg_too_long"),
        ({"json": {"channel": "C0GENERAL", "text": 5}}, "invalid_arguments"),
        (
            {"data": b"{not json", "headers": {"Content-Type": "application/json"}},
            "invalid_json",
        ),
        ({"data": b"text", "headers": {"Content-Type": "text/plain"}}, "invalid_form_data"),
    ],
)
def test_bad_requests_get_slacks_error_codes(
    fake_slack: FakeSlack, kwargs: dict[str, object], error: str
) -> None:
    headers = {"Authorization": f"Bearer {fake_slack.token}"}
    headers.update(kwargs.pop("headers", {}))  # type: ignore[arg-type]
    answer = requests.post(
        fake_slack.api_url + "chat.postMessage",
        headers=headers,
        timeout=5,
        **kwargs,  # type: ignore[arg-type]
    )
    assert answer.json() == {"ok": False, "error": error}


def test_exactly_the_maximum_is_accepted(fake_slack: FakeSlack) -> None:
    text = "x" * SLACK_MAX_TEXT
    answer = call(fake_slack, "chat.postMessage", json={"channel": "C0GENERAL", "text": text})
    assert answer.json()["ok"] is True


def test_unknown_methods_are_404_unknown_method(fake_slack: FakeSlack) -> None:
    answer = call(fake_slack, "chat.postMesage", json={})
    assert (answer.status_code, answer.json()["error"]) == (404, "unknown_method")


def test_update_checks_the_message_and_its_author(fake_slack: FakeSlack) -> None:
    ts = call(fake_slack, "chat.postMessage", json={"channel": "C0GENERAL", "text": "a"}).json()[
        "ts"
    ]
    foreign = fake_slack.add_foreign_message("C0GENERAL", "theirs")
    ok = call(fake_slack, "chat.update", json={"channel": "C0GENERAL", "ts": ts, "text": "b"})
    assert ok.json()["ok"] is True
    for missing_ts, error in (("1.2", "message_not_found"), (foreign, "cant_update_message")):
        answer = call(
            fake_slack, "chat.update", json={"channel": "C0GENERAL", "ts": missing_ts, "text": "c"}
        )
        assert answer.json()["error"] == error
    assert fake_slack.message("C0GENERAL", ts).edits == ["a"]


def test_the_canned_rate_limit_is_slacks(fake_slack: FakeSlack) -> None:
    fake_slack.script("chat.postMessage", FakeSlack.rate_limited(9))
    answer = call(fake_slack, "chat.postMessage", json={"channel": "C0GENERAL", "text": "x"})
    assert answer.status_code == 429
    assert answer.headers["Retry-After"] == "9"
    assert answer.json() == {"ok": False, "error": "ratelimited"}


def test_conversations_info_reads_the_query_string(fake_slack: FakeSlack) -> None:
    fake_slack.add_channel("C0PRIV", private=True, member=False)
    answer = requests.get(
        fake_slack.api_url + "conversations.info",
        params={"channel": "C0PRIV"},
        headers={"Authorization": f"Bearer {fake_slack.token}"},
        timeout=5,
    )
    channel = answer.json()["channel"]
    assert (channel["is_private"], channel["is_member"], channel["is_archived"]) == (
        True,
        False,
        False,
    )


def test_signed_headers_verify_with_the_sdk() -> None:
    secret = "s3cr3t"
    body = event_callback(message_event(channel="C1", text="hi"))
    headers = signed_headers(secret, body, retry_num=2)
    verifier = SignatureVerifier(secret)
    assert verifier.is_valid_request(body, headers)
    assert not SignatureVerifier("other").is_valid_request(body, headers)
    assert headers["X-Slack-Retry-Num"] == "2"
    old = signed_headers(secret, body, timestamp=time.time() - 600)
    assert not verifier.is_valid_request(body, old)
    assert json.loads(body)["event"]["channel"] == "C1"


def test_posting_faster_than_the_limit_gets_slacks_429(fake_slack: FakeSlack) -> None:
    fake_slack.limit_posting(burst=3, per_second=0.5)
    fake_slack.add_channel("C0OTHER")
    answers = [
        call(fake_slack, "chat.postMessage", json={"channel": "C0GENERAL", "text": str(n)})
        for n in range(4)
    ]
    assert [a.status_code for a in answers] == [200, 200, 200, 429]
    assert answers[-1].json() == {"ok": False, "error": "ratelimited"}
    assert int(answers[-1].headers["Retry-After"]) >= 1
    ts = answers[0].json()["ts"]
    edit = call(fake_slack, "chat.update", json={"channel": "C0GENERAL", "ts": ts, "text": "e"})
    assert edit.status_code == 429, "edits count against the channel's limit too"
    other = call(fake_slack, "chat.postMessage", json={"channel": "C0OTHER", "text": "x"})
    assert other.status_code == 200, "the limit is per channel"
    assert fake_slack.texts("C0GENERAL") == ["0", "1", "2"]


async def socket_frames(
    fake: FakeSlack, *, on_open: Callable[[], None] = lambda: None
) -> list[Any]:
    """Open a Socket Mode connection at the fake, call ``on_open`` (in a thread, once the fake
    has it), and read it until it ends: the JSON frames, then ``("close", code)`` for Slack's
    closing frame."""
    headers = {"Authorization": f"Bearer {fake.app_token}"}
    async with aiohttp.ClientSession() as session:
        async with session.post(fake.api_url + "apps.connections.open", headers=headers) as got:
            url = (await got.json())["url"]
        async with session.ws_connect(url, autoclose=False) as socket:
            await anyio.to_thread.run_sync(lambda: (fake.wait_for_socket(), on_open()))
            frames: list[Any] = []
            while (frame := await socket.receive()).type is aiohttp.WSMsgType.TEXT:
                frames.append(json.loads(frame.data))
            if frame.type is aiohttp.WSMsgType.CLOSE:
                frames.append(("close", frame.data))
            return frames


@pytest.mark.anyio
async def test_slack_sends_nothing_on_a_socket_before_its_hello(fake_slack: FakeSlack) -> None:
    def push_then_greet() -> None:
        fake_slack.push_event(event_callback(message_event(channel="C0GENERAL", text="x")))
        fake_slack.socket_disconnect("warning")
        fake_slack.socket_hello(1)

    fake_slack.hold_hello = True
    with anyio.fail_after(5):
        frames = await socket_frames(fake_slack, on_open=push_then_greet)
    assert [f[0] if isinstance(f, tuple) else f["type"] for f in frames] == [
        "hello",
        "events_api",
        "disconnect",
        "close",
    ]
    await anyio.to_thread.run_sync(lambda: fake_slack.wait_for_log("closed 1 by slack"))
    assert fake_slack.socket_log == ["open 1", "hello 1", "closed 1 by slack"]


@pytest.mark.anyio
async def test_a_connection_over_the_limit_is_told_too_many_websockets_and_closed(
    fake_slack: FakeSlack,
) -> None:
    fake_slack.socket_limit = 0
    with anyio.fail_after(5):
        frames = await socket_frames(fake_slack)
    assert frames[0]["type"] == "hello"
    assert frames[1] == {"type": "disconnect", "reason": "too_many_websockets"}
    assert frames[2] == ("close", 1000)
