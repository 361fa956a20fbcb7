"""A cheaper ``__init__`` for the ledger's frozen, slotted dataclasses.

A frozen dataclass's generated ``__init__`` stores each field through
``object.__setattr__(self, name, value)`` (its own ``__setattr__`` refuses): a global lookup,
an attribute lookup and a generic attribute store a field. An ``Obligation`` (20 fields) is
built two or three times a reply on the ledger's hot path, a ``Delivery`` (15) once a part,
and together they were about a quarter of the event loop's work a reply (issue 19). Storing
through each slot's own descriptor, bound once here, does the same thing at about half the
cost. The class stays frozen (an assignment after construction still raises), and its fields,
defaults, ``__post_init__``, equality, hash and repr are the dataclass's own.

Cheaper still (ADR 0135): the instance is given, for the length of ``__init__``, an unfrozen
class with the same slots (``__class__`` may move between two classes of the same layout), so
each field is a plain attribute store, which the interpreter specialises for slots; the class
is given back before ``__post_init__`` and before ``__init__`` returns: about 0.36 µs instead
of 0.79 µs an ``Obligation``.
An instance of a subclass (another layout) keeps the descriptor stores.
"""

from __future__ import annotations

import dataclasses
import operator
from typing import Any, SupportsIndex, TypeVar

__all__ = ["quick_init"]

C = TypeVar("C", bound=type[Any])


def quick_init(cls: C) -> C:
    """Replace the ``__init__`` of ``cls`` (a ``@dataclass(frozen=True, slots=True)``) by one
    with the same parameters that stores each field as a plain slot store (see above)."""
    params = dataclasses.fields(cls)
    if any(not f.init or f.kw_only or f.default_factory is not dataclasses.MISSING for f in params):
        raise TypeError(f"quick_init handles plain positional fields only, not {cls.__name__}'s")
    # the same slots, in the same order, and nothing else: the same layout as ``cls``
    unfrozen = type(f"_Unfrozen{cls.__name__}", (), {"__slots__": tuple(cls.__slots__)})
    scope: dict[str, Any] = {"_cls": cls, "_unfrozen": unfrozen, "_set_class": object.__setattr__}
    signature = []
    quick = ["    if type(self) is _cls:", "        _set_class(self, '__class__', _unfrozen)"]
    slow = ["    else:"]
    for f in params:
        scope[f"_set_{f.name}"] = cls.__dict__[f.name].__set__  # the slot's member descriptor
        if f.default is dataclasses.MISSING:
            signature.append(f.name)
        else:
            scope[f"_default_{f.name}"] = f.default
            signature.append(f"{f.name}=_default_{f.name}")
        quick.append(f"        self.{f.name} = {f.name}")
        slow.append(f"        _set_{f.name}(self, {f.name})")
    quick.append("        self.__class__ = _cls")
    body = quick + slow
    if hasattr(cls, "__post_init__"):
        body.append("    self.__post_init__()")
    # Generated as dataclasses generates its own: one store a field, no loop, no lookups.
    source = f"def __init__(self, {', '.join(signature)}):\n" + "\n".join(body) + "\n"
    exec(source, scope)  # the source names only the class's own fields and the bound setters
    init = scope["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    cls.__init__ = init
    cls.__reduce_ex__ = _quick_reduce(cls, [f.name for f in params])
    return cls


def _quick_reduce(cls: type[Any], names: list[str]) -> Any:
    """A ``__reduce_ex__`` that pickles an instance as its class and its fields' values, read by
    one C getter: a slotted dataclass's own pickling runs ``dataclasses.fields`` and a list
    comprehension in Python for every instance (ADR 0186: the ledger's writer process gets its
    rows pickled). Unpickled, the fields go through ``__init__`` as when built."""
    values = operator.attrgetter(*names)
    default = object.__reduce_ex__

    def __reduce_ex__(self: Any, protocol: SupportsIndex) -> Any:
        if type(self) is cls:
            return cls, values(self)
        return default(self, protocol)  # a subclass: another layout, the default way

    __reduce_ex__.__qualname__ = f"{cls.__qualname__}.__reduce_ex__"
    return __reduce_ex__
