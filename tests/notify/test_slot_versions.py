"""A slot's versions: a change is counted when the version is next read (the notifier's hot path
stores a flag instead of counting), and reads compare exactly as counted versions would."""

from __future__ import annotations

from bridge_core.notify.live import Slot


def test_changes_between_two_reads_make_one_new_version() -> None:
    slot = Slot(key=(0, "agent:a", 1))
    first = slot.version
    assert slot.version == first  # no change, no new version
    slot.changed = True
    slot.changed = True
    second = slot.version
    assert second > first
    assert slot.version == second


def test_owes_follows_the_latest_change_after_a_delivery() -> None:
    slot = Slot(key=(0, "agent:a", 1))
    assert slot.owes  # a new slot owes its first post
    slot.rendered = slot.version
    slot.delivered = slot.rendered
    assert not slot.owes
    slot.changed = True  # a change while nothing is queued
    assert slot.owes
    slot.rendered = slot.version
    slot.changed = True  # a change after the rendering, before its outcome
    slot.delivered = slot.rendered
    assert slot.owes  # the newer change is still owed
    slot.refused = slot.version
    assert not slot.owes
