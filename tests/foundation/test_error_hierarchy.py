"""The error tree drawn in ``bridge_core.errors``' docstring is the tree the code has."""

from __future__ import annotations

import importlib
import pkgutil
import re

import bridge_core
from bridge_core import errors
from bridge_core.errors import BridgeError
from bridge_core.ownership import AgentBusy

_NODE = re.compile(r"^(?P<indent>[ │]*)(?:[├└]── )?(?P<name>[A-Z]\w+)\b", re.MULTILINE)


def drawn_tree() -> dict[str, str | None]:
    """Each class named in the first picture of the docstring, mapped to its drawn parent."""
    picture = (errors.__doc__ or "").split("::", 1)[1].split("::", 1)[0]
    parents: dict[str, str | None] = {}
    stack: list[tuple[int, str]] = []
    for match in _NODE.finditer(picture):
        depth = len(match.group("indent")) + (4 if "──" in match.group(0) else 0)
        while stack and stack[-1][0] >= depth:
            stack.pop()
        parents[match.group("name")] = stack[-1][1] if stack else None
        stack.append((depth, match.group("name")))
    return parents


def bridge_error_classes() -> dict[str, type[BaseException]]:
    """Every BridgeError subclass defined in an importable module of the core."""
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.walk_packages(bridge_core.__path__, "bridge_core."):
        if ".testing" in info.name or info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, BridgeError):
                if value.__module__ == info.name:
                    found[value.__name__] = value
    return found


def test_the_picture_has_the_root_and_its_branches() -> None:
    tree = drawn_tree()
    assert tree["BridgeError"] is None
    assert tree["ClaimLost"] == "LedgerError"
    assert tree["SenderClosed"] == "TransportError"


def test_every_drawn_class_derives_from_its_drawn_parent() -> None:
    classes = bridge_error_classes()
    for name, parent in drawn_tree().items():
        assert name in classes, f"{name} is drawn in bridge_core.errors but no module defines it"
        if parent is not None:
            assert classes[parent] in classes[name].__mro__[1:], f"{name} is not a {parent}"


def test_every_bridge_error_in_the_code_is_drawn() -> None:
    missing = sorted(set(bridge_error_classes()) - set(drawn_tree()))
    assert missing == [], f"draw these in bridge_core/errors.py's docstring: {missing}"


def test_agent_busy_is_a_signal_outside_the_tree() -> None:
    assert not issubclass(AgentBusy, BridgeError)
