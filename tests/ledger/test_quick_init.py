"""``quick_init`` (ledger/frozen.py): the same instances as the dataclass's own ``__init__``,
still frozen, for the ledger's records (``Reply``, ``Obligation``, ``Delivery``) and for a class
with defaults and ``__post_init__``."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from bridge_core.ledger import Delivery, Obligation, Reply, State
from bridge_core.ledger.frozen import quick_init
from bridge_core.provider import MessageRef


def _twin(cls: type) -> type:
    """``cls`` rebuilt as a plain frozen slotted dataclass, with the dataclass's own init."""
    fields = [(f.name, f.type, f) for f in dataclasses.fields(cls)]
    copies = [
        (name, kind, dataclasses.field(default=f.default, repr=f.repr, compare=f.compare))
        for name, kind, f in fields
    ]
    return dataclasses.make_dataclass(cls.__name__, copies, frozen=True, slots=True)


ROW = dict(
    id="r1",
    profile="X",
    platform="console",
    channel="C1",
    thread=None,
    reply_to="m1",
    text="hello",
    chunks=("hello",),
    state=State.ATTEMPTING,
    attempts=1,
    resends=0,
    fence=1,
    owner="me",
    created_at=1.0,
    updated_at=2.0,
    next_attempt_at=None,
    last_error=None,
)


@pytest.mark.parametrize("cls", [Reply, Obligation, Delivery])
def test_the_records_keep_the_dataclass_parameters(cls: type) -> None:
    def shape(of: type) -> list[tuple[str, object, object]]:
        return [(p.name, p.kind, p.default) for p in inspect.signature(of).parameters.values()]

    assert shape(cls) == shape(_twin(cls))


def test_an_obligation_is_built_as_the_dataclass_would_and_stays_frozen() -> None:
    twin = _twin(Obligation)
    row = Obligation(**ROW)
    expected = twin(**ROW)
    for f in dataclasses.fields(Obligation):
        assert getattr(row, f.name) == getattr(expected, f.name), f.name
    assert row.penalty is False and row.delivered == () and row.partials == ()
    ref = MessageRef("C1", "5")
    positional = Obligation(*ROW.values(), True, (ref,), (ref,))
    assert positional.penalty is True and positional.delivered == (ref,)
    assert positional.partials == (ref,)
    assert dataclasses.replace(row, fence=2) == Obligation(**{**ROW, "fence": 2})
    with pytest.raises(dataclasses.FrozenInstanceError):
        row.fence = 5  # type: ignore[misc]
    with pytest.raises(TypeError):
        Obligation(**{k: v for k, v in ROW.items() if k != "owner"})  # type: ignore[call-arg]


def test_a_reply_is_built_as_the_dataclass_would_checked_and_frozen() -> None:
    ref = MessageRef("C1", "5")
    given = dict(obligation_id="o1", profile="X", platform="console", channel="C1", text="hi")
    one = Reply(**given)
    assert one.chunks == ("hi",) and one.thread is None and one.partials == ()
    full = {**given, "thread": "t", "reply_to": "m", "chunks": ("h", "i"), "partials": (ref,)}
    assert Reply(*full.values()) == Reply(**full)
    assert (Reply(**full).chunks, Reply(**full).partials) == (("h", "i"), (ref,))
    assert dataclasses.replace(one, text="ho").chunks == ("hi",)  # replace keeps chunks given
    assert Reply.answering(profile="X", platform="console", channel="C1", answers="a", text="t")
    for name in ("obligation_id", "profile", "platform", "channel"):
        with pytest.raises(ValueError, match=f"Reply.{name} must not be empty"):
            Reply(**{**given, name: ""})
    with pytest.raises(dataclasses.FrozenInstanceError):
        one.text = "changed"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        one.chunks = ()  # type: ignore[misc]


def test_defaults_and_post_init_run_as_the_dataclass_would() -> None:
    @quick_init
    @dataclasses.dataclass(frozen=True, slots=True)
    class Part:
        body: str
        count: int = 3
        label: str = ""

        def __post_init__(self) -> None:
            if not self.label:
                object.__setattr__(self, "label", f"{self.body}x{self.count}")

    assert Part("a").label == "ax3"
    assert Part("a", 2, label="kept") == Part(body="a", count=2, label="kept")
    assert Part("b", count=1).label == "bx1"
    with pytest.raises(dataclasses.FrozenInstanceError):
        Part("a").body = "b"  # type: ignore[misc]


def test_a_field_it_cannot_build_is_refused() -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Listed:
        items: list[str] = dataclasses.field(default_factory=list)

    with pytest.raises(TypeError, match="positional fields only"):
        quick_init(Listed)


def test_the_instance_has_its_own_class_before_post_init_and_after_and_subclasses_work() -> None:
    seen: list[type] = []

    @quick_init
    @dataclasses.dataclass(frozen=True, slots=True)
    class Part:
        body: str
        count: int = 3

        def __post_init__(self) -> None:
            seen.append(type(self))

    class Labelled(Part):  # another layout: one more slot
        __slots__ = ("label",)

    part = Part("a")
    assert type(part) is Part and seen == [Part]
    labelled = Labelled("b", 2)
    assert type(labelled) is Labelled and seen == [Part, Labelled]
    assert (labelled.body, labelled.count) == ("b", 2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        part.count = 4  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        labelled.body = "c"  # type: ignore[misc]
