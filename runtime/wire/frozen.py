"""Frozen, slotted records made without code generation: what every control message is.

A ``@dataclass(frozen=True, slots=True)`` writes and compiles six or seven methods per
class and then builds the class a second time for its slots: ~1.5 ms of CPU each, and the
control plane has ~45 records, so every process the runtime starts paid ~60 ms for them
before it ran anything (docs/internals/performance.md, "What a process start costs").
Here one set of methods, written once on :class:`Record`, serves every record; the
metaclass only reads the class body's annotations and defaults:

>>> class Point(Record):
...     x: int
...     label: str | None = None
>>> p = Point(1)
>>> p, p == Point(x=1, label=None), p.label
(Point(x=1, label=None), True, None)
>>> p.x = 2
Traceback (most recent call last):
dataclasses.FrozenInstanceError: cannot assign to field 'x'

What it keeps of a frozen dataclass: keyword or positional construction (TypeError for a
missing, unknown or repeated argument), equality and hashing by type and values, its repr,
no ``__dict__``, ``__match_args__``, pickling and copying.
"""

from __future__ import annotations

from dataclasses import FrozenInstanceError
from typing import Any

__all__ = ["Record"]


class _Frozen(type):
    """Reads a record class's fields from its annotations (ClassVar ones excepted), in
    the order of its bases then its own, and turns its defaults into ``_defaults``: a
    class variable of the same name as a slot is not allowed."""

    def __new__(mcs, name: str, bases: tuple, ns: dict[str, Any]):
        own = {f: hint for f, hint in ns.get("__annotations__", {}).items()
               if not _is_class_var(hint)}
        defaults = {f: ns.pop(f) for f in own if f in ns}
        ns["__slots__"] = tuple(own)
        cls = super().__new__(mcs, name, bases, ns)
        cls._hints = {**_inherited(bases, "_hints"), **own}
        cls._fields = tuple(cls._hints)
        cls._defaults = {**_inherited(bases, "_defaults"), **defaults}
        cls.__match_args__ = cls._fields
        _check_order(cls)
        return cls


def _is_class_var(hint: Any) -> bool:
    return str(hint).startswith(("ClassVar", "typing.ClassVar"))


def _inherited(bases: tuple, attr: str) -> dict:
    merged: dict = {}
    for base in reversed(bases):
        merged.update(getattr(base, attr, {}))
    return merged


def _check_order(cls: type) -> None:
    """A field without a default may not follow one with a default (as for a
    dataclass: positional construction would be ambiguous)."""
    seen_default = None
    for f in cls._fields:
        if f in cls._defaults:
            seen_default = f
        elif seen_default is not None:
            raise TypeError(f"{cls.__name__}: field {f!r} without a default follows "
                            f"{seen_default!r}, which has one")


class Record(metaclass=_Frozen):
    """The base of frozen records: subclass it and annotate the fields."""

    # set on each class by the metaclass (not annotated here: they would be fields):
    # _hints, field -> its annotation (a string under PEP 563); _fields, their order;
    # _defaults, field -> its default
    __slots__ = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        cls = type(self)
        given = kwargs if not args and len(kwargs) == len(cls._fields) \
            and kwargs.keys() == cls._hints.keys() else _arguments(cls, args, kwargs)
        for f, value in given.items():  # the common case (every field by keyword, as
            object.__setattr__(self, f, value)  # _decode does) skips _arguments

    def _values(self) -> tuple:
        return tuple(getattr(self, f) for f in self._fields)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        shown = ", ".join(f"{f}={getattr(self, f)!r}" for f in self._fields)
        return f"{type(self).__qualname__}({shown})"

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __reduce__(self) -> tuple:
        return type(self), self._values()


def _arguments(cls: type, args: tuple, kwargs: dict[str, Any]) -> dict[str, Any]:
    """Every field's value from a call's arguments and the defaults; TypeError as a
    dataclass's ``__init__`` would raise it."""
    if len(args) > len(cls._fields):
        raise TypeError(f"{cls.__name__}() takes {len(cls._fields)} positional arguments "
                        f"but {len(args)} were given")
    given = dict(zip(cls._fields, args))
    for f, value in kwargs.items():
        _check_keyword(cls, f, given)
        given[f] = value
    missing = [f for f in cls._fields if f not in given and f not in cls._defaults]
    if missing:
        raise TypeError(f"{cls.__name__}() missing required arguments {missing}")
    return {f: given[f] if f in given else cls._defaults[f] for f in cls._fields}


def _check_keyword(cls: type, name: str, given: dict[str, Any]) -> None:
    if name not in cls._hints:
        raise TypeError(f"{cls.__name__}() got an unexpected keyword argument {name!r}")
    if name in given:
        raise TypeError(f"{cls.__name__}() got multiple values for argument {name!r}")
