"""The shared provider conformance suite, run against a real Synapse.

Everything goes to the real homeserver; the faults the suite scripts for exactly one request go
through ``FaultProxy``, which answers that one request with the body Synapse itself sends for
the fault. The faults Synapse produces for real (a 429 from its own ``rc_message``, a kicked
bot's ``M_FORBIDDEN``, an unknown or redacted edit target) are tested against it directly in
``test_matrix_real_faults.py``.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

import anyio
import pytest
from bridge_matrix import plugin, provider_type
from bridge_matrix.inbound import SYNC_NAMESPACE
from bridge_matrix.testing import FaultProxy, ScriptedReply, Synapse
from bridge_matrix.testing.fixtures import MemoryKV, People

from bridge_core import ChatProvider, HttpResponse, InboundMessage, InboundSink, Unreachable
from bridge_core.hookspecs import ProviderContext
from bridge_core.testing.conformance import (
    ConformanceHarness,
    Fault,
    Inbound,
    InboundDriver,
    Operation,
    ProviderConformance,
)

RETRY_AFTER = 30.0
MARKER = "conformance marker: every event before this one was handled"


def current_position(synapse: Synapse, people: People) -> str:
    """The bot's ``/sync`` position right now (what a fresh start would store). The filter is
    unique per call: Synapse answers a repeated identical ``/sync`` from a two-minute cache."""
    unique = {"presence": {"types": [secrets.token_hex(8)]}, "room": {"timeline": {"limit": 0}}}
    answer = synapse.call(
        "GET",
        "/_matrix/client/v3/sync",
        user=people.bot,
        params={"timeout": 0, "filter": json.dumps(unique)},
    )
    return str(answer["next_batch"])


def sync_inbound(
    synapse: Synapse, people: People, room: str, kv: MemoryKV, proxy: FaultProxy
) -> InboundDriver:
    """Delivers through the provider's real ``receive`` (long-polling ``/sync``): the message,
    then a marker whose arrival proves the one before it was handled. A text seen before is a
    redelivery: the stored position is set back to where it was before that text, so the
    homeserver sends the same event again."""
    position_key = f"{people.bot.user_id}|{people.bot.device_id}"
    before: dict[str, bytes] = {}

    async def drive(
        provider: ChatProvider, sink: InboundSink, kind: Inbound, text: str
    ) -> HttpResponse | None:
        if kind is Inbound.FORGED:
            # /sync authenticates the token, not each event: a refused token is Unreachable.
            kv.data.pop((SYNC_NAMESPACE, position_key), None)
            proxy.script(
                "GET", "/sync", ScriptedReply.error(401, "M_UNKNOWN_TOKEN", "Invalid token")
            )
            with anyio.fail_after(10), pytest.raises(Unreachable):
                await provider.receive(sink)
            return None
        if text in before:
            kv.data[(SYNC_NAMESPACE, position_key)] = before[text]
        else:
            kv.data[(SYNC_NAMESPACE, position_key)] = current_position(synapse, people).encode()
            before[text] = kv.data[(SYNC_NAMESPACE, position_key)]
            if kind is Inbound.USER:
                synapse.send_text(people.person, room, text)
            elif kind is Inbound.BOT:
                synapse.send_text(
                    people.other_bot, room, text, content={"msgtype": "m.notice", "body": text}
                )
            else:
                synapse.send_text(people.bot, room, text)
            synapse.send_text(people.person, room, f"{MARKER} {text}")
        marker_seen = anyio.Event()

        async def forward(message: InboundMessage) -> None:
            if message.text.startswith(MARKER):
                if message.text == f"{MARKER} {text}":
                    marker_seen.set()
            else:
                await sink(message)

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(provider.receive, forward)
            with anyio.fail_after(15):
                await marker_seen.wait()
            tasks.cancel_scope.cancel()
        return None

    return drive


@pytest.fixture(scope="module")
def shared_room(synapse: Synapse, people: People) -> str:
    """One room for the whole suite: each test looks only at what it posted last."""
    return synapse.create_room(people.person, invite=(people.bot, people.other_bot))


class TestMatrixConformance(ProviderConformance):
    @pytest.fixture
    def harness(
        self, synapse: Synapse, people: People, shared_room: str, proxy: FaultProxy
    ) -> ConformanceHarness:
        room = shared_room
        kv = MemoryKV()

        def script_fault(fault: Fault, operation: Operation) -> float | None:
            method, path = ("PUT", "/send/m.room.message/")
            replies: dict[Fault, ScriptedReply] = {
                Fault.RATE_LIMITED: ScriptedReply.rate_limited(RETRY_AFTER),
                Fault.FORBIDDEN: ScriptedReply.error(
                    403, "M_FORBIDDEN", f"User {people.bot.user_id} not in room {room}"
                ),
                Fault.UNREACHABLE: ScriptedReply.error(
                    401, "M_UNKNOWN_TOKEN", "Invalid access token passed."
                ),
                Fault.REJECTED: ScriptedReply.error(413, "M_TOO_LARGE", "event too large"),
                Fault.SERVER_ERROR: ScriptedReply.error(502, "M_UNKNOWN", "Bad Gateway"),
                Fault.DROPPED: ScriptedReply(drop=True),
                Fault.SLOW: ScriptedReply(stall=3.0, body={"event_id": "$late"}),
            }
            if fault is Fault.NOT_FOUND:
                # What Synapse answers to an edit (a relation) of an event it does not have.
                reply = ScriptedReply.error(
                    400, "M_UNKNOWN", "Can't send relation to unknown event"
                )
            else:
                reply = replies[fault]
            proxy.script(method, path, reply)
            return RETRY_AFTER if fault is Fault.RATE_LIMITED else None

        def delivered(channel: str) -> list[str]:
            return [
                str(event["content"].get("body"))
                for event in synapse.messages_by(people.person, channel, people.bot.user_id)
            ]

        settings: dict[str, Any] = {
            "homeserver_url": proxy.url,
            "user_id": people.bot.user_id,
            "access_token": people.bot.access_token,
            "device_id": people.bot.device_id,
            "call_deadline": 1.0,
            "inbound": True,
            "sync_timeout": 5.0,
        }
        return ConformanceHarness(
            provider_type=provider_type(),
            settings=settings,
            channel=room,
            context=ProviderContext(profile="conformance", kv=kv),
            secrets=(people.bot.access_token,),
            script_fault=script_fault,
            delivered=delivered,
            request_count=proxy.count,
            thread_for=lambda ref: ref.message_id,
            extra_pings=("@room", "@ROOM", "@Room"),
            plugin=plugin,
            requests_per_call={"post": 1, "edit": 1},  # one request per call, edits included
            inbound=sync_inbound(synapse, people, room, kv, proxy),
        )
