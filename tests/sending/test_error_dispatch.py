"""The sender reads every provider error through ``ERROR_TABLE``: one handler per action."""

from __future__ import annotations

from pathlib import Path

from bridge_core.provider import ERROR_TABLE, NotifierAction, SendBudget
from bridge_core.providers.console import ConsoleProvider, ConsoleSettings
from bridge_core.sending import ChannelSender


def test_every_action_of_the_table_has_its_own_handler(tmp_path: Path) -> None:
    provider = ConsoleProvider(ConsoleSettings(transcript=tmp_path / "t.jsonl", output="none"))
    try:
        sender = ChannelSender(provider, channel="c", budget=SendBudget(burst=1, per_second=1.0))
        handlers = sender._on_failure
    finally:
        provider.close()
    assert set(handlers) == set(NotifierAction) == {r.notifier for r in ERROR_TABLE}
    assert len({handler.__name__ for handler in handlers.values()}) == len(NotifierAction)
