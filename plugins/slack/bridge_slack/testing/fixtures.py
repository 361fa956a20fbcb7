"""Pytest fixtures: ``fake_slack``, a running ``FakeSlack`` with one channel, ``C0GENERAL``,
stopped after the test. Import it into a ``conftest.py``
(``from bridge_slack.testing.fixtures import fake_slack``); it starts the fake through the core
kit's ``start_fake`` fixture, which bridge-core's pytest plugin provides.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from bridge_slack.testing.fake_slack import FakeSlack

__all__ = ["fake_slack"]


@pytest.fixture
def fake_slack(start_fake: Callable[[FakeSlack], FakeSlack]) -> FakeSlack:
    return start_fake(FakeSlack())
