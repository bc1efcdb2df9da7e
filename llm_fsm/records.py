"""Frozen dataclasses built at the cost of a plain one: :func:`quick_init`.

A frozen dataclass's generated ``__init__`` sets each field with ``object.__setattr__`` (its own
``__setattr__`` refuses every write), one call per field: twenty for a :class:`~llm_fsm.TurnResult`, and a
turn builds several such records (its request, its model call, the model's response and usage, the
decision, the result), which came to about a tenth of a turn's own time (``benchmarks/RESULTS.md`` §18).
:func:`quick_init` gives such a class an ``__init__`` with the same parameters, defaults and default factories
that writes the instance's ``__dict__`` in one update; everything else stays the dataclass it was (frozen,
compared, hashed, shown, copied and replaced the same way).
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

T = TypeVar("T")


class _Factory:
    """The default of a parameter whose field has a ``default_factory``, shown as the dataclass shows it."""

    def __repr__(self) -> str:
        return "<factory>"


_FACTORY = _Factory()


def quick_init(cls: type[T]) -> type[T]:
    """``cls`` (a frozen dataclass) with an ``__init__`` that sets its fields in one ``__dict__`` update.

    Only the plain case is changed: every field an ``__init__`` parameter, none keyword-only, no
    ``InitVar`` or ``ClassVar`` pseudo-field, no ``__post_init__``, no ``__slots__``, an ``__init__`` the
    dataclass generated; any other class is returned as it is, its ``__init__`` untouched."""
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or not params.init or "__slots__" in cls.__dict__:
        return cls
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]  # a dataclass: checked above
    every: dict[str, Any] = getattr(cls, "__dataclass_fields__", {})
    if len(every) != len(fields) or hasattr(cls, "__post_init__"):
        return cls
    if any(not f.init or f.kw_only is True for f in fields):
        return cls
    if getattr(cls.__init__, "__qualname__", "") != f"{cls.__qualname__}.__init__":
        return cls  # not the dataclass's own __init__ (inherited, or written by hand)
    namespace: dict[str, Any] = {"_FACTORY": _FACTORY}
    parameters, values = [], []
    for f in fields:
        if f.default is not dataclasses.MISSING:
            namespace[f"_default_{f.name}"] = f.default
            parameters.append(f"{f.name}=_default_{f.name}")
            values.append(f"{f.name!r}: {f.name}")
        elif f.default_factory is not dataclasses.MISSING:
            namespace[f"_factory_{f.name}"] = f.default_factory
            parameters.append(f"{f.name}=_FACTORY")
            values.append(f"{f.name!r}: _factory_{f.name}() if {f.name} is _FACTORY else {f.name}")
        else:
            parameters.append(f.name)
            values.append(f"{f.name!r}: {f.name}")
    source = f"def __init__(self, {', '.join(parameters)}):\n    self.__dict__.update({{{', '.join(values)}}})\n"
    exec(source, namespace)  # noqa: S102 (our own source, made of the class's field names)
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__annotations__ = dict(getattr(cls.__init__, "__annotations__", {}))
    init.__doc__ = cls.__init__.__doc__
    setattr(cls, "__init__", init)  # noqa: B010 (mypy refuses assigning a method)
    return cls
