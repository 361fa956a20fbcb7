"""The plain reading of an activity's JSON agrees with botbuilder's: whenever ``read_plain``
takes a body, ``Activity.deserialize`` takes it too and the bridge reads the same message, the
same conversation and the same reference fingerprint from both (bodies it does not take go to
the SDK, as every body did before)."""

from __future__ import annotations

from typing import Any

from botbuilder.schema import Activity
from bridge_teams.activity_json import inbound_from_plain, read_plain
from bridge_teams.inbound import inbound_from_activity, split_conversation_id
from bridge_teams.testing.fake_teams import FakeTeams
from hypothesis import given, settings
from hypothesis import strategies as st

SCALARS = st.none() | st.booleans() | st.integers(-2, 2) | st.floats(allow_nan=False)
NAMES = st.sampled_from(["", "Bridge", "28:bot", "29:user-1", "aad-1", "bot", "user", "x.y*"])
TEXTS = NAMES | st.text(max_size=6) | st.sampled_from(["<at>Bridge</at> hi", " <at>x.y*</at>"])
TIMES = st.sampled_from(
    ["2026-12-01T11:00:00Z", "2019-05-01T12:34:56.1234567Z", "2026-12-01T11:00:00.5+02:00",
     "0001-01-01T00:30:00+01:00", "2026-02-30T00:00:00Z", "2026-12-01", "yesterday",
     "2026-12-01T11:00:00", "9999-12-31T23:30:00-01:00"]
)  # fmt: skip
ACCOUNT_KEYS = st.sampled_from(["id", "name", "aadObjectId", "role", "properties", "other"])
ACCOUNTS = st.dictionaries(ACCOUNT_KEYS, TEXTS | SCALARS, max_size=4) | SCALARS | TEXTS
CONVERSATION_KEYS = st.sampled_from(
    ["id", "tenantID", "tenantId", "isGroup", "conversationType", "name", "properties"]
)
CONVERSATIONS = st.dictionaries(CONVERSATION_KEYS, TEXTS | SCALARS, max_size=5) | SCALARS
MENTIONS = st.fixed_dictionaries(
    {"type": st.sampled_from(["mention", "Mention", "clientInfo", 3])},
    optional={
        "mentioned": st.fixed_dictionaries({}, optional={"id": NAMES | SCALARS, "name": TEXTS})
        | SCALARS,
        "text": TEXTS | SCALARS,
    },
)
ENTITIES = st.lists(MENTIONS | SCALARS, max_size=3) | SCALARS
GOOD_ACCOUNTS = st.fixed_dictionaries(
    {"id": NAMES}, optional={"name": TEXTS, "aadObjectId": NAMES, "role": NAMES}
)
GOOD_MENTIONS = st.fixed_dictionaries(
    {"type": st.just("mention"), "mentioned": st.fixed_dictionaries({"id": NAMES, "name": TEXTS})},
    optional={"text": TEXTS},
)
# Mostly what the connector sends, so most examples are read plainly and compared; now and then
# a field of another shape, so the line between the plain reading and the SDK's is crossed.
GOOD = {
    "type": st.sampled_from(["message", "message", "conversationUpdate", ""]),
    "id": NAMES,
    "timestamp": TIMES,
    "serviceUrl": st.sampled_from(["http://svc", "http://svc/", ""]),
    "channelId": st.just("msteams"),
    "from": GOOD_ACCOUNTS,
    "recipient": GOOD_ACCOUNTS,
    "conversation": st.fixed_dictionaries(
        {"id": st.sampled_from(["19:c@thread.tacv2", "19:c@thread.tacv2;messageid=7", ""])},
        optional={"tenantID": NAMES, "tenantId": NAMES, "isGroup": st.booleans()},
    ),
    "text": TEXTS,
    "entities": st.lists(GOOD_MENTIONS | st.just({"type": "clientInfo"}), max_size=2),
}
ODD = {
    "type": SCALARS,
    "id": SCALARS,
    "timestamp": SCALARS,
    "localTimestamp": TIMES | SCALARS,
    "from": ACCOUNTS,
    "recipient": ACCOUNTS,
    "conversation": CONVERSATIONS,
    "text": SCALARS,
    "entities": ENTITIES,
    "channelData": st.none() | st.dictionaries(NAMES, SCALARS | st.lists(SCALARS), max_size=2),
    "attachments": st.lists(st.dictionaries(NAMES, NAMES, max_size=1), max_size=1),
    "membersAdded": st.lists(ACCOUNTS, max_size=1),
    "historyDisclosed": SCALARS,
    "textFormat": TEXTS | SCALARS,
    "unknownKey": SCALARS | TEXTS,
}
BODIES = st.builds(
    lambda good, odd: {**good, **odd},
    st.fixed_dictionaries(
        {key: GOOD[key] for key in ("type", "conversation")},
        optional={key: value for key, value in GOOD.items() if key not in ("type", "conversation")},
    ),
    st.fixed_dictionaries({}, optional=ODD).filter(lambda odd: len(odd) <= 2),
)


def _sdk(body: dict[str, Any]) -> Activity | None:
    try:
        activity: Activity | None = Activity.deserialize(body)
    except (ValueError, TypeError, AttributeError):
        return None
    return activity


def _fingerprint_of(activity: Activity) -> tuple[object, ...]:
    return (
        activity.service_url,
        activity.channel_id,
        activity.conversation.tenant_id,
        activity.recipient.id if activity.recipient is not None else None,
    )


@settings(max_examples=120, deadline=None)  # agreement, not time, is what it checks
@given(BODIES)
def test_a_plain_reading_reads_what_the_sdk_reads(body: dict[str, Any]) -> None:
    plain = read_plain(body)
    if plain is None:
        return  # the SDK reads it, as before
    activity = _sdk(body)
    assert activity is not None, "read plainly, yet the SDK refuses it"
    assert plain.type == activity.type
    assert plain.has_conversation == (activity.conversation is not None)
    if activity.type is None or activity.conversation is None or not activity.conversation.id:
        assert plain.type is None or not plain.conversation_id
        return  # both refused as not an activity
    assert plain.conversation_id == activity.conversation.id
    recipient = plain.recipient.id if plain.recipient is not None else None
    assert (plain.service_url, plain.channel_id, plain.tenant_id, recipient) == _fingerprint_of(
        activity
    )
    channel, thread = split_conversation_id(plain.conversation_id)
    try:
        expected = inbound_from_activity(activity, profile="p")
    except (TypeError, KeyError, AttributeError):
        raise AssertionError("read plainly, yet the SDK's reading fails") from None
    assert inbound_from_plain(plain, profile="p", channel=channel, thread=thread) == expected


def test_the_connector_s_own_activities_are_read_plainly() -> None:
    with FakeTeams() as fake:
        fake.add_conversation("19:c@thread.tacv2")
        body = fake.message_activity("19:c@thread.tacv2;messageid=42", "<at>Bridge</at> hello")
    body["entities"] = [
        {"type": "mention", "mentioned": {"id": fake.bot_id, "name": "Bridge"},
         "text": "<at>Bridge</at>"},
    ]  # fmt: skip
    plain = read_plain(body)
    assert plain is not None
    activity = Activity.deserialize(body)
    message = inbound_from_plain(plain, profile="p", channel="19:c@thread.tacv2", thread="42")
    assert message == inbound_from_activity(activity, profile="p")
    assert message is not None
    assert message.text == "hello"
